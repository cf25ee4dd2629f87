"""Delayed delivery with the official client (``deliver_at`` / ``deliver_after``): Shared and
Key_Shared subscriptions hold a message until its time, also across a broker restart (kill
-9); Exclusive and Failover deliver at once; the namespace's ``delayedDelivery`` policy turns
it off."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS, assert_nothing_more
from tests.http.helpers import AdminHttp, unique

HOUR_MS = 3600 * 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone of this test alone: some tests restart it."""
    process = StandaloneProcess(tmp_path_factory.mktemp("standalone"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.parametrize(
    "sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared], ids=["shared", "key"]
)
def test_a_message_waits_for_its_time_and_others_pass_it(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic)
    producer.send(b"later", deliver_at=_now_ms() + HOUR_MS, partition_key="k")
    due_at = _now_ms() + 1500
    producer.send(b"soon", deliver_after=timedelta(milliseconds=1500), partition_key="k")
    producer.send(b"now", partition_key="k")

    first = consumer.receive(RECEIVE_MS)
    assert first.data() == b"now"  # the held messages were passed over
    consumer.acknowledge(first)
    second = consumer.receive(RECEIVE_MS)
    assert second.data() == b"soon"
    assert _now_ms() >= due_at  # never before its time
    consumer.acknowledge(second)
    assert_nothing_more(consumer)  # "later" is still held


@pytest.mark.parametrize(
    "sub_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover], ids=str
)
def test_exclusive_and_failover_deliver_at_once(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "s", consumer_type=sub_type)
    producer = client.create_producer(topic)
    producer.send(b"later", deliver_at=_now_ms() + HOUR_MS)
    producer.send(b"now")
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(2)] == [b"later", b"now"]


def test_held_messages_survive_a_crash(server: StandaloneProcess) -> None:
    topic = unique("persistent://public/default/delayed-restart")
    client = _client(server)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"an hour", deliver_at=_now_ms() + HOUR_MS)
    due_at = _now_ms() + 4000
    producer.send(b"4 s", deliver_at=due_at)
    producer.send(b"now")
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == b"now"
    consumer.acknowledge(msg)
    consumer.close()  # the ack is durable
    client.close()

    server.kill()
    server.start()
    client = _client(server)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        msg = consumer.receive(RECEIVE_MS)
        assert msg.data() == b"4 s"
        assert _now_ms() >= due_at  # held again after the restart, until its time
        consumer.acknowledge(msg)
        assert_nothing_more(consumer)
    finally:
        client.close()


def test_namespace_policy_turns_delayed_delivery_off(server: StandaloneProcess) -> None:
    admin = AdminHttp(server.http_url)
    ns = unique("public/delays")
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    path = f"/admin/v2/namespaces/{ns}/delayedDelivery"
    assert admin.get(path) == {"active": True, "tickTime": 1000}  # the default
    topic = f"persistent://{ns}/t"
    client = _client(server)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        producer.send(b"held", deliver_at=_now_ms() + HOUR_MS)
        assert_nothing_more(consumer)

        admin.ok("POST", path, {"active": False, "tickTime": 500})
        assert admin.get(path) == {"active": False, "tickTime": 500}
        assert consumer.receive(RECEIVE_MS).data() == b"held"  # released when turned off
        producer.send(b"no delay now", deliver_at=_now_ms() + HOUR_MS)
        assert consumer.receive(RECEIVE_MS).data() == b"no delay now"
    finally:
        client.close()
    assert "tickTime" in admin.refused("POST", path, {"active": True, "tickTime": 0}).reason
    admin.ok("DELETE", path)
    assert admin.get(path) == {"active": True, "tickTime": 1000}
