"""Seed 001's Pulsar Catalog: every namespace a Spark database, every topic a table.

Spark 4.3 keeps no options for catalog tables of a Python data source: ``CREATE TABLE t
USING magnetar OPTIONS (url '…', topic '…')`` succeeds, but a later read of ``t`` hands
the source an empty option map (TBLPROPERTIES are dropped too). What it does keep, and
pass to the reader, is the table schema with its field metadata. So each table is created
with the source's schema and the options as JSON in the metadata of its ``topic`` column
(:data:`magnetar.spark.source.OPTIONS_KEY`); the source merges them back in.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from pyspark.sql.types import StructField, StructType

from magnetar.core.names import TopicName
from magnetar.spark.planning import http_get
from magnetar.spark.source import OPTIONS_KEY


def database_name(namespace: str) -> str:
    """``public/default`` → ``public_default`` (Spark identifiers take no ``/``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", namespace.replace("/", "_"))


def table_name(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", TopicName.parse(topic).local)


def attach(spark: Any, url: str = "http://localhost:8080") -> list[str]:
    """Create a database per namespace and a table per topic (reading through the magnetar
    source); returns the ``database.table`` names. Safe to call again: tables are
    recreated, so they pick up new topics and schema changes. Raises SparkSourceError
    when Magnetar cannot be reached; tables created before a failure stay."""
    url = url.rstrip("/")
    created = []
    for namespace in http_get(f"{url}/magnetar/v1/namespaces"):
        db = database_name(namespace)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        query = urllib.parse.urlencode({"namespace": namespace})
        for topic in http_get(f"{url}/magnetar/v1/topics?{query}"):
            name = f"{db}.{table_name(topic)}"
            _create_table(spark, name, {"url": url, "topic": topic})
            created.append(name)
    return created


def _create_table(spark: Any, name: str, options: dict[str, str]) -> None:
    schema = spark.read.format("magnetar").options(**options).load().schema
    carried = json.dumps(options, sort_keys=True)
    fields = [
        StructField(f.name, f.dataType, f.nullable, {**f.metadata, OPTIONS_KEY: carried})
        if f.name == "topic"
        else f
        for f in schema.fields
    ]
    db, table = name.split(".", 1)
    spark.sql(f"DROP TABLE IF EXISTS `{db}`.`{table}`")
    spark.catalog.createTable(name, source="magnetar", schema=StructType(fields), **options)
