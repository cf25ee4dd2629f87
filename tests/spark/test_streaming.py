"""Micro-batch reads through ``spark.readStream.format("magnetar")``: availableNow with
``maxOffsetsPerTrigger``, new data picked up from the checkpoint, a durable subscription
moved along, and a query killed mid-way resumed with no loss and no duplicate."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from magnetar.testing.server import StandaloneProcess
from tests.spark.conftest import Admin, produce

pytestmark = pytest.mark.slow
QUERY_TIMEOUT_S = 120


class Collector:
    """A foreachBatch sink kept in the test process: every invocation is logged, and the
    output is keyed by batch id (a replayed batch overwrites its own rows, as an
    idempotent sink would). ``crash_on`` fails that batch once, after writing its rows."""

    def __init__(self, crash_on: int | None = None) -> None:
        self.calls: list[tuple[int, list[tuple[int, int]]]] = []
        self.out: dict[int, list[tuple[int, int]]] = {}
        self.crash_on = crash_on

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(
            (r.partition, r.offset) for r in batch.select("partition", "offset").collect()
        )
        self.calls.append((batch_id, rows))
        self.out[batch_id] = rows
        if batch_id == self.crash_on:
            self.crash_on = None
            raise RuntimeError(f"simulated crash in batch {batch_id}")

    def delivered(self) -> list[tuple[int, int]]:
        return sorted(row for rows in self.out.values() for row in rows)


def run_available_now(
    spark: SparkSession, url: str, topic: str, checkpoint: Path, sink: Collector, **options: str
) -> Any:
    reader = spark.readStream.format("magnetar").option("url", url).option("topic", topic)
    query = (
        reader.options(startingOffsets="earliest", **options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    return query


def test_available_now_then_new_data_with_rate_limit_and_subscription(
    spark: SparkSession,
    server: StandaloneProcess,
    admin: Admin,
    client: pulsar.Client,
    topic: str,
    tmp_path: Path,
) -> None:
    admin.call("PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", 2)
    produce(client, f"{topic}-partition-0", [b"a"] * 70)
    produce(client, f"{topic}-partition-1", [b"b"] * 50)
    sub = f"pipeline-{uuid.uuid4().hex[:6]}"
    for p in (0, 1):
        base = f"/admin/v2/persistent/public/default/{topic}-partition-{p}"
        admin.call("PUT", f"{base}/subscription/{sub}?messageId=earliest")
    assert [admin.backlog(f"{topic}-partition-{p}", sub) for p in (0, 1)] == [70, 50]

    sink = Collector()
    options = {"maxOffsetsPerTrigger": "40", "subscription": sub}
    query = run_available_now(spark, server.http_url, topic, tmp_path, sink, **options)
    sizes = [len(rows) for _, rows in sink.calls]
    assert sum(sizes) == 120 and max(sizes) <= 40 and len(sizes) >= 3, sizes
    assert [p["numInputRows"] for p in query.recentProgress] == sizes
    assert sink.delivered() == [(0, o) for o in range(70)] + [(1, o) for o in range(50)]
    # The subscription was moved to the end, including the last batch's offsets.
    assert [admin.backlog(f"{topic}-partition-{p}", sub) for p in (0, 1)] == [0, 0]

    produce(client, f"{topic}-partition-1", [b"c"] * 30)
    assert admin.backlog(f"{topic}-partition-1", sub) == 30
    first_run = len(sink.calls)
    run_available_now(spark, server.http_url, topic, tmp_path, sink, **options)
    assert sorted(row for _, rows in sink.calls[first_run:] for row in rows) == [
        (1, o) for o in range(50, 80)
    ]
    assert sink.delivered() == [(0, o) for o in range(70)] + [(1, o) for o in range(80)]
    assert [admin.backlog(f"{topic}-partition-{p}", sub) for p in (0, 1)] == [0, 0]


def test_killed_query_resumes_from_its_checkpoint_without_loss_or_duplicate(
    spark: SparkSession,
    server: StandaloneProcess,
    client: pulsar.Client,
    topic: str,
    tmp_path: Path,
) -> None:
    produce(client, topic, [f"m{i}".encode() for i in range(100)])
    sink = Collector(crash_on=1)
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(StreamingQueryException, match="simulated crash in batch 1"):
        run_available_now(
            spark, server.http_url, topic, checkpoint, sink, maxOffsetsPerTrigger="30"
        )
    # Batch 1 was planned (offset log) but never committed: the crash left it half done.
    assert (checkpoint / "offsets" / "1").exists() and (checkpoint / "commits" / "0").exists()
    assert not (checkpoint / "commits" / "1").exists()
    crashed = dict(sink.calls)[1]

    run_available_now(spark, server.http_url, topic, checkpoint, sink, maxOffsetsPerTrigger="30")
    replays = [rows for batch_id, rows in sink.calls if batch_id == 1]
    assert replays == [crashed, crashed]  # the same offsets again, not more, not fewer
    assert [batch_id for batch_id, _ in sink.calls] == [0, 1, 1, 2, 3]
    assert sink.delivered() == [(0, o) for o in range(100)]
