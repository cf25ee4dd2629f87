"""``df.write.format("magnetar")`` and ``writeStream.format("magnetar")``: replays leave no
duplicate (the broker's deduplication on deterministic producer names and sequence ids),
a half-written task's replay loses nothing, and the sink refuses to run unprotected."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import Row, SparkSession

from magnetar.spark.sink import _produce
from magnetar.testing.server import StandaloneProcess
from tests.spark.conftest import Admin, produce

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def namespace(admin: Admin) -> Iterator[str]:
    """A namespace with deduplication on (the sink's requirement), apart from the others."""
    ns = f"public/sink-{uuid.uuid4().hex[:6]}"
    admin.call("PUT", f"/admin/v2/namespaces/{ns}")
    admin.call("POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    yield ns


def stored(admin: Admin, ns: str, topic: str) -> int:
    """Messages in the (non-partitioned) topic: its end offset."""
    return int(admin.plan(topic, ns)["partitions"][0]["end"])


def read_values(spark: SparkSession, url: str, topic: str) -> list[bytes]:
    df = spark.read.format("magnetar").option("url", url).option("topic", topic).load()
    return [r.value for r in df.select("value").collect()]


def test_batch_write_twice_with_the_same_write_id_stores_once(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, namespace: str, topic: str
) -> None:
    target = f"persistent://{namespace}/{topic}"
    df = spark.createDataFrame(
        [(f"v{i}", f"k{i % 5}") for i in range(200)], "value string, key string"
    )
    df = df.repartition(2)
    writer = df.write.format("magnetar").option("url", server.http_url).option("topic", target)
    writer.option("writeId", "nightly-1").mode("append").save()
    assert stored(admin, namespace, topic) == 200
    writer.option("writeId", "nightly-1").mode("append").save()  # the same write, replayed
    assert stored(admin, namespace, topic) == 200
    writer.option("writeId", "nightly-2").mode("append").save()  # a new write
    assert stored(admin, namespace, topic) == 400
    values = read_values(spark, server.http_url, target)
    assert sorted(values) == sorted([f"v{i}".encode() for i in range(200)] * 2)


def test_streaming_batch_replayed_after_its_commit_entry_is_lost_leaves_no_duplicate(
    spark: SparkSession,
    server: StandaloneProcess,
    admin: Admin,
    client: pulsar.Client,
    namespace: str,
    topic: str,
    tmp_path: Path,
) -> None:
    source = f"{topic}_in"
    sent = [f"e{i}".encode() for i in range(120)]
    produce(client, source, sent)
    target = f"persistent://{namespace}/{topic}"

    def run() -> list[tuple[int, int]]:
        query = (
            spark.readStream.format("magnetar")
            .option("url", server.http_url)
            .option("topic", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "50")
            .load()
            .select("value", "key")
            .writeStream.format("magnetar")
            .option("url", server.http_url)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]

    assert run() == [(0, 50), (1, 50), (2, 20)]
    assert stored(admin, namespace, topic) == 120
    # As if the driver died after the sink wrote batch 2 but before Spark recorded it.
    (tmp_path / "commits" / "2").unlink()
    (tmp_path / "commits" / ".2.crc").unlink(missing_ok=True)
    assert run() == [(2, 20)]  # batch 2 ran again, writing the same 20 rows
    assert stored(admin, namespace, topic) == 120
    assert read_values(spark, server.http_url, target) == sent


def test_replay_of_a_half_written_task_stores_the_missing_rows_exactly_once(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, namespace: str, topic: str
) -> None:
    # What a retried Spark task does: the same producer name and micro-batch, the same
    # rows again, after a first attempt that stored only a prefix. Batches of the first
    # attempt and of the replay have different boundaries; none may straddle and drop.
    target = f"persistent://{namespace}/{topic}"
    rows = [Row(value=f"r{i}".encode()) for i in range(1000)]
    name = f"spark-{uuid.uuid4().hex[:8]}-0"
    assert _produce(server.pulsar_url, target, name, 3, iter(rows[:437])) == 437
    assert stored(admin, namespace, topic) == 437
    assert _produce(server.pulsar_url, target, name, 3, iter(rows)) == 1000
    assert stored(admin, namespace, topic) == 1000
    assert read_values(spark, server.http_url, target) == [r.value for r in rows]


def test_the_first_write_to_a_namespace_without_dedup_turns_it_on_for_its_topic(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, topic: str
) -> None:
    """public/default deduplicates nothing (the default, as in Pulsar): the exactly-once sink
    turns deduplication on for its own topic, so a user's first write succeeds and a replay
    of it still stores nothing twice; the namespace is left as it was."""
    policy = f"/admin/v2/persistent/public/default/{topic}/deduplicationEnabled"
    assert admin.get("/admin/v2/namespaces/public/default/deduplication") is not True
    df = spark.createDataFrame([(f"v{i}",) for i in range(30)], "value string").repartition(2)
    writer = df.write.format("magnetar").option("url", server.http_url).option("topic", topic)
    writer.option("writeId", "first").mode("append").save()
    assert admin.partition(topic)["end"] == 30
    assert admin.get(policy) is True and admin.get(policy + "?applied=true") is True
    writer.option("writeId", "first").mode("append").save()  # the same write, replayed
    assert admin.partition(topic)["end"] == 30, "exactly once holds"
    assert admin.get("/admin/v2/namespaces/public/default/deduplication") is not True


def test_sink_refuses_a_topic_whose_own_policy_turns_dedup_off(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, topic: str
) -> None:
    admin.call("POST", f"/admin/v2/persistent/public/default/{topic}/deduplicationEnabled", False)
    df = spark.createDataFrame([("x",)], "value string")
    writer = df.write.format("magnetar").option("url", server.http_url).option("topic", topic)
    with pytest.raises(AnalysisException, match="exactly-once writes need deduplication"):
        writer.mode("append").save()
    assert not [t for t in admin.get("/admin/v2/persistent/public/default") if topic in t]
    writer.option("exactlyOnce", "false").mode("append").save()  # at-least-once, on request
    assert admin.partition(topic)["end"] == 1


def test_save_modes_other_than_append_say_to_use_append(
    spark: SparkSession, server: StandaloneProcess, admin: Admin, topic: str
) -> None:
    df = spark.createDataFrame([("x",)], "value string")
    writer = df.write.format("magnetar").option("url", server.http_url).option("topic", topic)
    with pytest.raises(AnalysisException, match="Append"):  # Spark's own check, before ours
        writer.save()
    with pytest.raises(AnalysisException, match=r'append-only.*\.mode\("append"\)'):
        writer.mode("overwrite").save()
    assert not [t for t in admin.get("/admin/v2/persistent/public/default") if topic in t]
