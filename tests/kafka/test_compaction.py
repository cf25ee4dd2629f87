"""Kafka ``cleanup.policy=compact`` (issue 17): the config is the topic's compaction
threshold policy (CreateTopics, AlterConfigs, IncrementalAlterConfigs SET / APPEND /
SUBTRACT / DELETE, DescribeConfigs), compaction keeps the latest value per key of
Kafka-written records (a null value removes its key), Kafka consumers of a compacted topic
read the compacted view below its horizon with the original offsets, and a Pulsar reader
with ``is_read_compacted`` reads the same view."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import AdminHttp, run_standalone, wait_until
from tests.kafka.conftest import TIMEOUT_S
from tests.kafka.reading import read_to_end


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory)


@pytest.fixture
def kafka_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(kafka_admin: AdminClient, topic: str, **config: str) -> None:
    new = NewTopic(topic, 1, config=config)
    kafka_admin.create_topics([new])[topic].result(TIMEOUT_S)


def _cleanup_policy(kafka_admin: AdminClient, topic: str) -> tuple[str, bool]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = kafka_admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    entry = configs["cleanup.policy"]
    return entry.value, entry.is_read_only


def _alter(kafka_admin: AdminClient, topic: str, op: AlterConfigOpType, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("cleanup.policy", value, incremental_operation=op)],
    )
    kafka_admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)


def _compact(admin: AdminHttp, topic: str) -> None:
    url = f"/admin/v2/persistent/public/default/{topic}-partition-0/compaction"
    admin.ok("PUT", url)
    status = wait_until(lambda: (s := admin.get(url))["status"] != "RUNNING" and s, "compaction")
    assert status == {"status": "SUCCESS", "lastError": ""}


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[int]:
    """Send ``records`` (key, value; None a tombstone) in one go; their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    offsets: dict[int, int] = {}

    def done(i: int) -> object:
        def report(error: KafkaError | None, message: Message) -> None:
            assert error is None, error
            offsets[i] = message.offset()

        return report

    for i, (key, value) in enumerate(records):
        producer.produce(topic, value, key=key, on_delivery=done(i))
    assert producer.flush(TIMEOUT_S) == 0
    return [offsets[i] for i in range(len(records))]


def _consume(bootstrap: str, topic: str, expect: int) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of everything a fresh consumer reads from the earliest offset."""
    got = read_to_end(bootstrap, topic, expect)
    return [(message.offset(), message.key(), message.value()) for message in got]


def test_cleanup_policy_is_the_compaction_policy(kafka_admin: AdminClient, topic: str) -> None:
    _create(kafka_admin, topic, **{"cleanup.policy": "compact,delete"})
    assert _cleanup_policy(kafka_admin, topic) == ("compact", False)
    _alter(kafka_admin, topic, AlterConfigOpType.SUBTRACT, "compact")
    assert _cleanup_policy(kafka_admin, topic) == ("delete", False)
    _alter(kafka_admin, topic, AlterConfigOpType.APPEND, "compact")
    assert _cleanup_policy(kafka_admin, topic) == ("compact", False)
    _alter(kafka_admin, topic, AlterConfigOpType.DELETE, "")
    assert _cleanup_policy(kafka_admin, topic) == ("delete", False)
    _alter(kafka_admin, topic, AlterConfigOpType.SET, "compact")
    assert _cleanup_policy(kafka_admin, topic) == ("compact", False)
    with pytest.raises(KafkaException, match=r"cleanup\.policy='shred' is not supported"):
        _alter(kafka_admin, topic, AlterConfigOpType.SET, "shred")
    with pytest.raises(KafkaException, match="is not supported"):
        _create(kafka_admin, f"{topic}-bad", **{"cleanup.policy": "delete,shred"})


def test_consumers_read_the_compacted_view_with_original_offsets(
    standalone: StandaloneProcess, bootstrap: str, kafka_admin: AdminClient, topic: str
) -> None:
    _create(kafka_admin, topic, **{"cleanup.policy": "compact"})
    first = [(b"k0", b"a"), (b"k1", b"a"), (b"k2", b"a"), (b"k0", b"b"), (b"k1", None)]
    second = [(b"k2", b"b"), (b"k3", b"a"), (b"k3", b"c")]
    offsets = _produce(bootstrap, topic, first) + _produce(bootstrap, topic, second)
    assert offsets == list(range(8))
    _compact(AdminHttp(standalone.http_url), topic)
    # the latest value of each key, k1 removed by its tombstone; offsets kept, with gaps
    # (inside batches too: offset 3 is the only one left of the first batch)
    view = [(3, b"k0", b"b"), (5, b"k2", b"b"), (7, b"k3", b"c")]
    assert _consume(bootstrap, topic, len(view)) == view
    # after the horizon the topic is read as written
    assert _produce(bootstrap, topic, [(b"k3", b"d"), (b"k3", None)]) == [8, 9]
    assert _consume(bootstrap, topic, 5) == [*view, (8, b"k3", b"d"), (9, b"k3", None)]

    client = pulsar.Client(standalone.pulsar_url)
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}-partition-0",
            pulsar.MessageId.earliest,
            is_read_compacted=True,
        )
        got = []
        while reader.has_message_available():
            message = reader.read_next(int(TIMEOUT_S * 1000))
            value = None if message.has_null_value() else message.data()
            got.append((message.partition_key(), value))
    finally:
        client.close()
    assert got == [("k0", b"b"), ("k2", b"b"), ("k3", b"c"), ("k3", b"d"), ("k3", None)]


def test_a_delete_topic_is_read_whole_even_when_compacted(
    standalone: StandaloneProcess, bootstrap: str, kafka_admin: AdminClient, topic: str
) -> None:
    """A compaction run on a topic whose cleanup.policy is delete (Pulsar's trigger) serves
    Pulsar's read_compacted readers; Kafka consumers still read every record."""
    _create(kafka_admin, topic)
    _produce(bootstrap, topic, [(b"k", b"1"), (b"k", b"2")])
    _compact(AdminHttp(standalone.http_url), topic)
    assert _consume(bootstrap, topic, 2) == [(0, b"k", b"1"), (1, b"k", b"2")]
