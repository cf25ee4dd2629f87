"""Bounded reads through ``spark.read.format("magnetar")`` against a real standalone: every
message exactly once and in offset order wherever its segment lives (object store, local
closed segment, open segment), time ranges that open only overlapping segments, JSON-schema
topics, and the catalog."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from pulsar.schema import Boolean, Double, Integer, JsonSchema, Record, String
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from magnetar.spark import attach
from magnetar.spark.options import parse
from magnetar.spark.source import MagnetarBatchReader
from magnetar.testing.server import StandaloneProcess
from tests.spark.conftest import Admin, offload, produce, wait_clock_past

pytestmark = pytest.mark.slow


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i:04d}".encode() for i in range(n)]


def pieces(url: str, **options: str) -> list[tuple[str, int, int, int]]:
    """The planned input partitions as (kind, partition, start, end)."""
    reader = MagnetarBatchReader(parse({"url": url, **options}, streaming=False))
    return [(p.kind, p.partition, p.start, p.end) for p in reader.pieces]


def by_partition(rows: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for r in rows:
        out.setdefault(r.partition, []).append(r)
    return out


def test_partitioned_topic_across_object_store_local_and_open_segments(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, client: pulsar.Client, topic: str
) -> None:
    admin.call("PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 3)
    sent = {0: values("p0", 260), 1: values("p1", 120), 2: values("p2", 30)}
    # Partition 0: 130 entries of 2 messages (batches) → segments [0,100) [100,200) open
    # [200,260), the closed ones offloaded. Partition 1: single messages → closed local
    # [0,50) [50,100), open [100,120). Partition 2: only an open segment.
    produce(client, f"{topic}-partition-0", sent[0], per_entry=2)
    produce(client, f"{topic}-partition-1", sent[1])
    produce(client, f"{topic}-partition-2", sent[2])
    offload(admin, topic, 0)

    states = [[s["state"] for s in p["segments"]] for p in admin.plan(topic)["partitions"]]
    assert states == [["OFFLOADED", "OFFLOADED", "OPEN"], ["CLOSED", "CLOSED", "OPEN"], ["OPEN"]]
    assert pieces(server.http_url, topic=topic) == [
        ("parquet", 0, 0, 100),
        ("parquet", 0, 100, 200),
        ("flight", 0, 200, 260),
        ("flight", 1, 0, 120),  # neighbouring local segments: one Flight stream
        ("flight", 2, 0, 30),
    ]

    df = spark.read.format("magnetar").option("url", server.http_url).option("topic", topic)
    rows = df.load().select("partition", "offset", "value", "topic").collect()
    got = by_partition(rows)
    for p, expected in sent.items():
        assert [r.offset for r in got[p]] == list(range(len(expected)))  # once, in order
        assert [r.value for r in got[p]] == expected
    assert {r.topic for r in rows} == {f"persistent://public/default/{topic}"}

    # Split into more input partitions than segments: still every message exactly once.
    split = df.option("minPartitions", "9").load()
    assert split.rdd.getNumPartitions() >= 9
    ranges = split.groupBy("partition").agg(
        F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi")
    )
    assert {r.partition: (r.n, r.lo, r.hi) for r in ranges.collect()} == {
        p: (len(v), 0, len(v) - 1) for p, v in sent.items()
    }


def test_time_range_opens_only_overlapping_segments(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, client: pulsar.Client, topic: str
) -> None:
    # Five segments with disjoint publish-time ranges: s0, s1 offloaded, s2, s3 closed
    # local, s4 open.
    for phase, n in enumerate([50, 50, 50, 50, 30]):
        if phase == 2:
            offload(admin, topic)
        if phase:
            wait_clock_past(max(s["maxTime"] or 0 for s in admin.partition(topic)["segments"]))
        produce(client, topic, values(f"s{phase}", n))
    segs = [s for s in admin.partition(topic)["segments"] if s["minTime"] is not None]
    assert [(s["first"], s["end"], s["state"]) for s in segs] == [
        (0, 50, "OFFLOADED"),
        (50, 100, "OFFLOADED"),
        (100, 150, "CLOSED"),
        (150, 200, "CLOSED"),
        (200, 230, "OPEN"),
    ]
    start, end = segs[1]["minTime"], segs[2]["maxTime"] + 1
    url = server.http_url
    assert pieces(url, topic=topic, startingTimestamp=str(start), endingTimestamp=str(end)) == [
        ("parquet", 0, 50, 100),
        ("flight", 0, 100, 150),
    ]
    assert pieces(url, topic=topic, startingTimestamp=str(segs[3]["minTime"])) == [
        ("flight", 0, 150, 230)
    ]
    assert pieces(url, topic=topic, endingTimestamp=str(segs[0]["maxTime"] + 1)) == [
        ("parquet", 0, 0, 50)
    ]

    rows = (
        spark.read.format("magnetar")
        .option("url", url)
        .option("topic", topic)
        .option("startingTimestamp", str(start))
        .option("endingTimestamp", str(end))
        .load()
        .select("offset", "value", "publishTime")
        .collect()
    )
    assert [r.offset for r in rows] == list(range(50, 150))
    assert [r.value for r in rows] == values("s1", 50) + values("s2", 50)
    times = [r.publishTime.timestamp() * 1000 for r in rows]
    assert start <= min(times) and max(times) < end


class Reading(Record):
    sensor = String()
    seq = Integer()
    celsius = Double()
    ok = Boolean()


def test_json_schema_topic_gives_a_decoded_data_struct_and_catalog_tables(
    spark: SparkSession, server: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(
        f"persistent://public/default/{topic}", schema=JsonSchema(Reading)
    )
    sent = [Reading(sensor=f"s{i % 3}", seq=i, celsius=i / 4, ok=i % 2 == 0) for i in range(12)]
    for r in sent:
        producer.send(r)
    producer.close()

    df = spark.read.format("magnetar").option("url", server.http_url).option("topic", topic).load()
    data_type = df.schema["data"].dataType
    assert {f.name: f.dataType.simpleString() for f in data_type.fields} == {
        "sensor": "string",
        "seq": "int",
        "celsius": "double",
        "ok": "boolean",
    }
    rows = df.select("offset", "data.*").orderBy("offset").collect()
    assert [(r.sensor, r.seq, r.celsius, r.ok) for r in rows] == [
        (r.sensor, r.seq, r.celsius, r.ok) for r in sent
    ]

    # A narrower schema given by the user: only those columns are built and shipped.
    narrow = (
        spark.read.format("magnetar")
        .schema("data struct<sensor string, seq int, celsius double, ok boolean>, offset long")
        .option("url", server.http_url)
        .option("topic", topic)
        .load()
    )
    assert narrow.columns == ["data", "offset"]
    assert [(r.offset, r.data.seq) for r in narrow.orderBy("offset").collect()] == [
        (i, i) for i in range(12)
    ]

    # Catalog: every namespace a database, every topic a table, queried by SQL name.
    tables = attach(spark, server.http_url)
    assert f"public_default.{topic}" in tables
    assert spark.sql(f"SELECT count(*) AS n FROM public_default.{topic}").first().n == 12
    hot = spark.sql(f"SELECT data.seq FROM public_default.{topic} WHERE data.sensor = 's1'")
    assert sorted(r.seq for r in hot.collect()) == [1, 4, 7, 10]
    listed = {r.tableName for r in spark.sql("SHOW TABLES IN public_default").collect()}
    assert topic.lower() in listed
