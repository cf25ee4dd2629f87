"""Tier 7: the PySpark data source ``magnetar`` (batch, stream, sink) and the catalog.

``import magnetar.spark`` stays cheap: pyspark is imported only when the source is used.

Importing it also makes ``spark.read.format("magnetar")`` work out of the box, whatever
interpreter runs the job (``.venv/bin/python job.py`` without the venv activated): Spark
finds Python data sources, and runs their readers and writers, in worker processes started
with ``PYSPARK_PYTHON`` — by default ``python3`` from PATH, which need not have Magnetar —
so, unless the user chose one, the workers get this interpreter; and a session that is
already running gets the source registered. See docs/spark.md.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any


def attach(spark: Any, url: str = "http://localhost:8080") -> list[str]:
    """Every namespace a Spark database, every topic a table (see :mod:`.catalog`)."""
    from magnetar.spark.catalog import attach as _attach

    return _attach(spark, url)


def register(spark: Any) -> None:
    """Register the source explicitly (not needed once Magnetar is installed)."""
    try:
        from magnetar.spark.source import MagnetarDataSource
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the Spark source needs pyspark: pip install 'magnetar[spark]'") from e
    spark.dataSource.register(MagnetarDataSource)


def _prepare() -> None:
    """Run at import: the worker interpreter for sessions started later, and registration
    on the session already active (pyspark is not imported for it if the job has not)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    register(session)
    workers = getattr(session.sparkContext, "pythonExec", None)
    if workers and os.path.realpath(str(workers)) != os.path.realpath(sys.executable):
        warnings.warn(
            f"Spark's Python workers run {workers!r}, not this interpreter: they need "
            "Magnetar installed, or import magnetar.spark before creating the SparkSession",
            stacklevel=3,
        )


_prepare()
