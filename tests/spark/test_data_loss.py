"""``failOnDataLoss``: a read asking for offsets retention already removed fails with a
clear error, or — with ``failOnDataLoss=false`` — continues from the earliest offset left."""

from __future__ import annotations

import json
import uuid

import pulsar
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession

from magnetar.testing.server import StandaloneProcess
from tests.spark.conftest import Admin, produce, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trimmed(admin: Admin, client: pulsar.Client) -> str:
    """A topic (full name) of 120 messages whose first two segments retention deleted."""
    ns = f"public/lossy-{uuid.uuid4().hex[:6]}"
    admin.call("PUT", f"/admin/v2/namespaces/{ns}")
    admin.call(
        "POST",
        f"/admin/v2/namespaces/{ns}/retention",
        {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
    )
    topic = f"persistent://{ns}/events"
    # Subscribe first: with retention 0/0 and no subscription to wait for, closed segments
    # would go before anyone read them.
    consumer = client.subscribe(topic, "trim", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, [f"m{i}".encode() for i in range(120)])
    last = None
    for _ in range(120):
        last = consumer.receive(10_000)
    consumer.acknowledge_cumulative(last)
    consumer.close()
    wait_until(
        lambda: admin.plan("events", ns)["partitions"][0]["start"] == 100,
        "retention to delete the consumed closed segments",
    )
    return topic


def test_batch_read_below_the_first_offset(
    spark: SparkSession, server: StandaloneProcess, trimmed: str
) -> None:
    reader = (
        spark.read.format("magnetar")
        .option("url", server.http_url)
        .option("topic", trimmed)
        .option("startingOffsets", json.dumps({trimmed: {"0": 0}}))
    )
    with pytest.raises(AnalysisException) as failed:
        reader.load().collect()
    message = str(failed.value)
    assert f"{trimmed} partition 0: offsets 0..99 were removed by retention" in message
    assert "set failOnDataLoss=false to continue from the earliest" in message

    rows = reader.option("failOnDataLoss", "false").load().select("offset", "value").collect()
    assert [r.offset for r in rows] == list(range(100, 120))
    assert [r.value for r in rows] == [f"m{i}".encode() for i in range(100, 120)]


def test_stream_resuming_below_the_first_offset(
    spark: SparkSession, server: StandaloneProcess, trimmed: str
) -> None:
    def run(fail: str, name: str) -> list[int]:
        query = (
            spark.readStream.format("magnetar")
            .option("url", server.http_url)
            .option("topic", trimmed)
            .option("startingOffsets", json.dumps({"events": {"0": 40}}))  # local name works
            .option("failOnDataLoss", fail)
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        return [r.offset for r in spark.sql(f"SELECT offset FROM {name} ORDER BY offset").collect()]

    with pytest.raises(StreamingQueryException, match=r"offsets 40\.\.99 were removed"):
        run("true", "lossy_strict")
    assert run("false", "lossy_lenient") == list(range(100, 120))
