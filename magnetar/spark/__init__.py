"""Tier 7: the PySpark data source ``magnetar`` (batch, stream, sink) and the catalog.

``import magnetar.spark`` stays cheap: pyspark is imported only when the source is used.
"""

from __future__ import annotations

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
