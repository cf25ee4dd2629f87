"""Static membership (KIP-345, ``group.instance.id``) and the cooperative-sticky rebalance
(KIP-429) with confluent-kafka, classic and KIP-848 groups (issue 17): a static member that
restarts gets its partitions back and nobody else rebalances; a second consumer with the same
instance id fences the first (classic: FENCED_INSTANCE_ID, fatal for it) or is refused while
the first lives (KIP-848: UNRELEASED_INSTANCE_ID, as Kafka 4 does); cooperative-sticky moves
only the partitions that change owner, every message read once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import confluent_kafka
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from magnetar.protocols.kafka.coordinator import GroupCoordinator
from magnetar.protocols.kafka.errors import ErrorCode, GroupError
from magnetar.testing.server import StandaloneProcess
from tests.http.helpers import run_standalone
from tests.kafka.conftest import TIMEOUT_S

Events = list[tuple[str, str, list[int]]]
SETTLE_S = 1.5  # several heartbeats: long enough for a rebalance to show if one started


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from run_standalone(tmp_path_factory, "--group-consumer-heartbeat-interval-ms", "300")


def _topic(bootstrap: str, partitions: int = 4) -> str:
    name = f"static-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT_S)
    return name


def _member(bootstrap: str, topic: str, name: str, events: Events, **config: object) -> Consumer:
    settings = {"bootstrap.servers": bootstrap, "group.id": topic,
                "auto.offset.reset": "earliest", **config}  # fmt: skip
    if settings.get("group.protocol") != "consumer":
        settings.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 300})
    consumer = Consumer(settings)

    def assigned(_: Consumer, parts: list[confluent_kafka.TopicPartition]) -> None:
        events.append((name, "assign", sorted(p.partition for p in parts)))

    def revoked(_: Consumer, parts: list[confluent_kafka.TopicPartition]) -> None:
        events.append((name, "revoke", sorted(p.partition for p in parts)))

    consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    return consumer


def _pump(members: list[Consumer], until: Callable[[], bool], seen: list[bytes] | None = None,
          errors: list[KafkaError] | None = None) -> None:  # fmt: skip
    """Poll every member until ``until()`` holds; fail after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while not until():
        assert time.monotonic() < deadline, "the group did not settle"
        _poll_all(members, seen, errors)


def _settle(members: list[Consumer], errors: list[KafkaError] | None = None) -> None:
    end = time.monotonic() + SETTLE_S
    while time.monotonic() < end:
        _poll_all(members, None, errors)


def _poll_all(members: list[Consumer], seen: list[bytes] | None,
              errors: list[KafkaError] | None) -> None:  # fmt: skip
    for m in members:
        message = m.poll(0.05)
        if message is None:
            continue
        if message.error():
            assert errors is not None, message.error()
            errors.append(message.error())
        elif seen is not None:
            seen.append(message.value())


def _owned(consumer: Consumer) -> list[int]:
    return sorted(p.partition for p in consumer.assignment())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    bootstrap: str, protocol: str
) -> None:
    topic = _topic(bootstrap)
    events: Events = []
    config = {"group.protocol": protocol}
    a = _member(bootstrap, topic, "a", events, **{"group.instance.id": "a"}, **config)
    b = _member(bootstrap, topic, "b", events, **{"group.instance.id": "b"}, **config)
    _pump([a, b], lambda: bool(_owned(a)) and bool(_owned(b)) and
          len(_owned(a)) + len(_owned(b)) == 4)  # fmt: skip
    _settle([a, b])
    had, b_had = _owned(a), _owned(b)
    a.close()  # a static member does not leave (classic) or leaves with epoch -2 (KIP-848)
    events.clear()
    again = _member(bootstrap, topic, "a2", events, **{"group.instance.id": "a"}, **config)
    try:
        _pump([again, b], lambda: bool(_owned(again)))
        _settle([again, b])
        assert _owned(again) == had
        assert _owned(b) == b_had
        assert [e for e in events if e[0] == "b"] == []  # b never rebalanced
    finally:
        again.close()
        b.close()


def test_a_duplicate_instance_id_fences_the_older_classic_member(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=2)
    events: Events = []
    first = _member(bootstrap, topic, "first", events, **{"group.instance.id": "x"})
    _pump([first], lambda: len(_owned(first)) == 2)
    second = _member(bootstrap, topic, "second", events, **{"group.instance.id": "x"})
    errors: list[KafkaError] = []
    try:
        _pump([second, first], lambda: len(_owned(second)) == 2 and bool(errors), errors=errors)
        assert errors[0].code() == KafkaError._FATAL
        assert "group.instance.id" in errors[0].str()  # "Static consumer fenced by other ..."
    finally:
        second.close()
        first.close()


def test_a_live_static_instance_id_is_not_taken_in_a_consumer_group(bootstrap: str) -> None:
    topic = _topic(bootstrap, partitions=2)
    events: Events = []
    config = {"group.protocol": "consumer", "group.instance.id": "y"}
    first = _member(bootstrap, topic, "first", events, **config)
    _pump([first], lambda: len(_owned(first)) == 2)
    second = _member(bootstrap, topic, "second", events, **config)
    errors: list[KafkaError] = []
    try:
        _settle([first, second], errors)
        assert _owned(first) == [0, 1]
        assert _owned(second) == []
    finally:
        second.close()
        first.close()


def test_cooperative_sticky_moves_only_what_changes_owner(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(400):
        producer.produce(topic, b"%d" % i, partition=i % 4)
    assert producer.flush(TIMEOUT_S) == 0
    events: Events = []
    seen: list[bytes] = []
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    a = _member(bootstrap, topic, "a", events, **config)
    _pump([a], lambda: len(_owned(a)) == 4, seen)
    b = _member(bootstrap, topic, "b", events, **config)
    try:
        _pump([a, b], lambda: len(_owned(a)) == 2 and len(_owned(b)) == 2 and
              len(seen) >= 400, seen)  # fmt: skip
        revoked = [e[2] for e in events if e == ("a", "revoke", e[2])]
        assert revoked == [_owned(b)]  # a gave up only what b took: incremental
        assert sorted(seen) == sorted(b"%d" % i for i in range(400))  # each once
    finally:
        a.close()
        b.close()


# -- the classic coordinator in process -------------------------------------------------------


async def test_a_replaced_static_member_is_fenced_everywhere() -> None:
    coordinator = GroupCoordinator()
    join = {"client_id": "c", "client_host": "h", "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 1_000, "protocol_type": "consumer",
            "protocols": [("range", b"m")]}  # fmt: skip
    first = await coordinator.join("g", "", instance_id="i", **join)
    await coordinator.sync("g", first.generation, first.member_id, {first.member_id: b"a"}, "i")
    second = await coordinator.join("g", "", instance_id="i", **join)
    assert second.generation == first.generation  # no rebalance: answered at once
    assert await coordinator.sync("g", second.generation, second.member_id, {}, "i") == b"a"
    calls = [
        lambda: coordinator.heartbeat("g", first.generation, first.member_id, "i"),
        lambda: coordinator.check_commit("g", first.generation, first.member_id, "i"),
        lambda: coordinator.leave("g", first.member_id, "i"),
    ]
    for call in calls:
        with pytest.raises(GroupError) as fenced:
            call()
        assert fenced.value.wire_code == ErrorCode.FENCED_INSTANCE_ID
    coordinator.heartbeat("g", second.generation, second.member_id, "i")
    await coordinator.aclose()
