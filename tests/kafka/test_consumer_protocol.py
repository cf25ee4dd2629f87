"""KIP-848 with the real client: confluent-kafka members with ``group.protocol=consumer``
join, share, describe and commit; regex subscriptions follow new topics; Metadata carries
topic ids. (Rebalancing on leave and kill is in test_groups.py, for both protocols.)"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import run_standalone
from tests.kafka.conftest import TIMEOUT_S, RawKafka

from kafka.protocol.metadata import MetadataRequest  # isort: skip


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Members heartbeat every 200 ms, so rebalances settle quickly."""
    yield from run_standalone(tmp_path_factory, "--group-consumer-heartbeat-interval-ms", "200")


def _create(bootstrap: str, *topics: str, partitions: int = 4) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions) for t in topics])
    for f in futures.values():
        f.result(30)


def _produce(bootstrap: str, topic: str, n: int, partitions: int = 4) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, value=f"{topic}:{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str, **extra: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _poll_until(consumers: list[confluent_kafka.Consumer], done: object) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the group did not get there in time"
        for c in consumers:
            msg = c.poll(0.05)
            assert msg is None or msg.error() is None, msg.error()


def _owned(c: confluent_kafka.Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def test_two_members_share_describe_and_commit(bootstrap: str, topic: str) -> None:
    _create(bootstrap, topic)
    _produce(bootstrap, topic, 40)
    group = f"g-{topic}"
    a, b = _consumer(bootstrap, group), _consumer(bootstrap, group)
    try:
        a.subscribe([topic])
        _poll_until([a], lambda: len(_owned(a)) == 4)
        b.subscribe([topic])
        _poll_until([a, b], lambda: len(_owned(a)) == 2 and len(_owned(b)) == 2)
        assert _owned(a) | _owned(b) == {(topic, p) for p in range(4)}

        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        members = {
            frozenset((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
            for m in described.members
        }
        assert members == {frozenset(_owned(a)), frozenset(_owned(b))}

        # commits carry the member epoch; metadata is kept
        mine = [confluent_kafka.TopicPartition(t, p, 7, metadata="m") for t, p in _owned(a)]
        a.commit(offsets=mine, asynchronous=False)
        committed = a.committed([confluent_kafka.TopicPartition(t, p) for t, p in _owned(a)])
        assert {(tp.offset, tp.metadata) for tp in committed} == {(7, "m")}
    finally:
        a.close()
        b.close()
    # both left: the group is empty, its commits stay
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.state == confluent_kafka.ConsumerGroupState.EMPTY


def test_every_message_is_read_once_by_a_group_of_three(bootstrap: str, topic: str) -> None:
    _create(bootstrap, topic, partitions=6)
    _produce(bootstrap, topic, 600, partitions=6)
    members = [_consumer(bootstrap, f"g-{topic}") for _ in range(3)]
    seen: list[bytes] = []
    try:
        for c in members:
            c.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < 600 and time.monotonic() < deadline:
            for c in members:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    seen.append(msg.value())
                    c.commit(message=msg, asynchronous=True)
    finally:
        for c in members:
            c.close()
    assert sorted(seen) == sorted(f"{topic}:{i}".encode() for i in range(600))


def test_a_regex_subscription_follows_new_topics(bootstrap: str, topic: str) -> None:
    first, second = f"{topic}-a", f"{topic}-b"
    _create(bootstrap, first, partitions=2)
    c = _consumer(bootstrap, f"g-{topic}", **{"topic.metadata.refresh.interval.ms": "500"})
    try:
        c.subscribe([f"^{topic}-.*"])
        _poll_until([c], lambda: _owned(c) == {(first, 0), (first, 1)})
        _create(bootstrap, second, partitions=2)
        _poll_until([c], lambda: {t for t, _ in _owned(c)} == {first, second})
    finally:
        c.close()


def test_the_range_assignor_is_used_when_asked(bootstrap: str, topic: str) -> None:
    _create(bootstrap, topic)
    group = f"g-{topic}"
    c = _consumer(bootstrap, group, **{"group.remote.assignor": "range"})
    try:
        c.subscribe([topic])
        _poll_until([c], lambda: len(_owned(c)) == 4)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.partition_assignor == "range"
    finally:
        c.close()


def test_classic_and_consumer_members_share_one_group(bootstrap: str, topic: str) -> None:
    """Kafka 4's online migration: a consumer-protocol member turns a stable classic group
    into a consumer group (the classic member stays and is assigned by the coordinator); a
    classic member may join a consumer group; when the last consumer-protocol member leaves,
    the group is classic again. Every message is read at every step."""
    _create(bootstrap, topic)
    group = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    classic_conf = {"group.protocol": "classic", "heartbeat.interval.ms": "300"}
    first = _consumer(bootstrap, group, **classic_conf)
    modern = _consumer(bootstrap, group)
    second = _consumer(bootstrap, group, **classic_conf)
    sent = 0

    def kind() -> confluent_kafka.ConsumerGroupType:
        return admin.describe_consumer_groups([group])[group].result(30).type

    def read_all(members: list[confluent_kafka.Consumer]) -> None:
        nonlocal sent
        _produce(bootstrap, topic, 40)
        sent += 40
        got = 0
        deadline = time.monotonic() + TIMEOUT_S
        while got < 40 and time.monotonic() < deadline:
            for c in members:
                msg = c.poll(0.05)
                if msg is not None and msg.error() is None:
                    got += 1
                    c.commit(message=msg, asynchronous=False)
        assert got == 40

    def shared(members: list[confluent_kafka.Consumer]) -> bool:
        owned = [_owned(c) for c in members]
        return all(len(o) == 4 // len(members) for o in owned) and len(set().union(*owned)) == 4

    try:
        first.subscribe([topic])
        _poll_until([first], lambda: shared([first]))
        assert kind() == confluent_kafka.ConsumerGroupType.CLASSIC
        modern.subscribe([topic])  # upgrade
        _poll_until([first, modern], lambda: shared([first, modern]))
        assert kind() == confluent_kafka.ConsumerGroupType.CONSUMER
        read_all([first, modern])
        first.close()  # a classic member leaves a consumer group
        _poll_until([modern], lambda: shared([modern]))
        second.subscribe([topic])  # a classic member joins a consumer group
        _poll_until([modern, second], lambda: shared([modern, second]))
        assert kind() == confluent_kafka.ConsumerGroupType.CONSUMER
        read_all([modern, second])
        modern.close()  # downgrade
        _poll_until([second], lambda: shared([second]))
        assert kind() == confluent_kafka.ConsumerGroupType.CLASSIC
        read_all([second])
    finally:
        for c in (first, modern, second):
            with contextlib.suppress(RuntimeError):  # closed already
                c.close()


def test_metadata_carries_topic_ids(standalone: StandaloneProcess, topic: str) -> None:
    _create(f"127.0.0.1:{standalone.kafka_port}", topic, partitions=2)
    raw = RawKafka(standalone.kafka_port)
    v12 = MetadataRequest[12]
    by_name = raw.request(v12(topics=[v12.MetadataRequestTopic(name=topic)]))
    (found,) = by_name.topics
    assert found.error_code == 0 and found.topic_id is not None
    by_id = raw.request(v12(topics=[v12.MetadataRequestTopic(topic_id=found.topic_id, name=None)]))
    assert [(t.name, len(t.partitions)) for t in by_id.topics] == [(topic, 2)]
    unknown = raw.request(v12(topics=[v12.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)]))
    assert unknown.topics[0].error_code == 100  # UNKNOWN_TOPIC_ID
    raw.close()


def test_a_consumer_outside_group_management_commits(bootstrap: str, topic: str) -> None:
    """A consumer that never subscribes (group.protocol=consumer still sends its own member
    id) may commit to an empty group, as Kafka allows with epoch -1."""
    _create(bootstrap, topic, partitions=1)
    c = _consumer(bootstrap, f"g-{topic}")
    try:
        for metadata in (None, "hello world", "नमस्ते"):
            tp = confluent_kafka.TopicPartition(topic, 0, 1)
            if metadata is not None:
                tp = confluent_kafka.TopicPartition(topic, 0, 1, metadata)
            c.commit(offsets=[tp], asynchronous=False)
            (got,) = c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
            assert (got.offset, got.metadata) == (1, metadata)
    finally:
        c.close()
