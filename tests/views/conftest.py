"""Fixtures of the views tests: real PostgreSQL and Redis servers (installed when missing),
a shared in-process Spark session, and helpers to publish and poll."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.testing.datastores import PostgresServer, RedisServer, ensure_installed

STORES = ["sqlite", "postgresql", "redis"]


@pytest.fixture(scope="session")
def postgresql_url() -> Iterator[str]:
    ensure_installed()
    with PostgresServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    ensure_installed()
    with RedisServer() as server:
        yield server.url


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The URL of a live store of the kind ``request.param`` names."""
    kind = request.param
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return str(request.getfixturevalue(f"{kind}_url"))


@pytest.fixture(scope="session")
def spark() -> Any:
    """One in-process SparkSession (shared with other packages' tests when they made one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.runSQLOnFiles", "false")  # as the views' session (views/session.py)
        .getOrCreate()
    )
