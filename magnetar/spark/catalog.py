"""Seed 001's Pulsar Catalog: every namespace a Spark database, every topic a table."""

from __future__ import annotations

import re
from typing import Any

from magnetar.core.names import TopicName
from magnetar.spark.planning import http_get


def database_name(namespace: str) -> str:
    """``public/default`` → ``public_default`` (Spark identifiers take no ``/``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", namespace.replace("/", "_"))


def table_name(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", TopicName.parse(topic).local)


def attach(spark: Any, url: str = "http://localhost:8080") -> list[str]:
    """Create a database per namespace and a table per topic (reading through the magnetar
    source); returns the ``database.table`` names. Safe to call again to pick up new topics."""
    url = url.rstrip("/")
    created = []
    for namespace in http_get(f"{url}/magnetar/v1/namespaces"):
        db = database_name(namespace)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        for topic in http_get(f"{url}/magnetar/v1/topics?namespace={namespace}"):
            table = f"`{db}`.`{table_name(topic)}`"
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {table} USING magnetar "
                f"OPTIONS (url '{url}', topic '{topic}')"
            )
            created.append(f"{db}.{table_name(topic)}")
    return created
