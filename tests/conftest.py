"""Fixtures shared by every test package."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.testing.server import REPO, StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess


@pytest.fixture(scope="module", autouse=True)
def _garbage_of_the_module() -> Iterator[None]:
    """Collect each module's garbage as it ends. A client left unclosed in a reference cycle
    (its socket) is otherwise found whenever the collector next runs, and its
    ResourceWarning fails whatever test is running then: here it fails the teardown of
    the module that made it."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One real ``magnetar standalone`` per test module, on free ports."""
    data: Path = tmp_path_factory.mktemp("standalone")
    server = StandaloneProcess(data)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session per test run (start-up takes 10-30 s on 2 cores).

    Spark's Python workers must run this interpreter (the venv's), bind to loopback, and
    find ``pyspark_magnetar`` on their ``sys.path`` whatever the working directory: an
    editable install exposes it through an import hook that PySpark's data-source
    discovery (``pkgutil.iter_modules``) does not see.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.runSQLOnFiles", "false")  # as the views' session (views/session.py)
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """One real ZooKeeper per test run (Debian's package; `make test` installs it). Tests
    keep apart by using a chroot of their own."""
    server = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
