"""Topic compaction with the official client: the REST trigger and status, consumers and
readers with ``is_read_compacted`` (the compacted view up to the horizon, the topic after
it), tombstones, batches, the compacted ledger beside the topic, a second run over the first
one's view, a restart, the namespace threshold and TableView."""

from __future__ import annotations

import json

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import RECEIVE_MS, RawConnection, assert_nothing_more, drain
from tests.cli.test_cli_admin import magnetar
from tests.http.helpers import AdminHttp, unique, wait_until

EARLIEST = pulsar.InitialPosition.Earliest
T = pb.BaseCommand.Type


@pytest.fixture
def admin(standalone: StandaloneProcess) -> AdminHttp:
    return AdminHttp(standalone.http_url)


def _path(topic: str) -> str:
    return topic.removeprefix("persistent://")


def compact(admin: AdminHttp, topic: str) -> None:
    """Trigger a run and wait for it to succeed."""
    url = f"/admin/v2/persistent/{_path(topic)}/compaction"
    admin.ok("PUT", url)
    status = wait_until(
        lambda: (s := admin.get(url))["status"] != "RUNNING" and s, f"compaction of {topic}"
    )
    assert status == {"status": "SUCCESS", "lastError": ""}


def _send(client: pulsar.Client, topic: str, messages: list[tuple[str, bytes | None]]) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for key, value in messages:
        producer.send(value, partition_key=key)  # type: ignore[arg-type]  # None: a tombstone
    producer.close()


def _keyed(messages: list[pulsar.Message]) -> list[tuple[str, bytes | None]]:
    return [(m.partition_key(), None if m.has_null_value() else m.data()) for m in messages]


def _read_all(reader: pulsar.Reader) -> list[pulsar.Message]:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(RECEIVE_MS))
    return out


def test_latest_value_per_key_then_the_live_topic(
    client: pulsar.Client, admin: AdminHttp, topic: str
) -> None:
    url = f"/admin/v2/persistent/{_path(topic)}/compaction"
    client.create_producer(topic).close()
    assert admin.get(url) == {"status": "NOT_RUN", "lastError": ""}
    _send(client, topic, [("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"), ("b", None)])
    compact(admin, topic)
    _send(client, topic, [("a", b"a3"), ("c", None)])  # after the horizon: all of it

    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert _keyed(_read_all(reader)) == [("a", b"a2"), ("c", b"c1"), ("a", b"a3"), ("c", None)]
    plain = client.create_reader(topic, pulsar.MessageId.earliest)
    assert len(_read_all(plain)) == 7  # the topic itself keeps everything

    consumer = client.subscribe(topic, "s", initial_position=EARLIEST, is_read_compacted=True)
    got = [consumer.receive(RECEIVE_MS) for _ in range(4)]
    assert [m.data() for m in got[:3]] == [b"a2", b"c1", b"a3"]
    for m in got:
        consumer.acknowledge(m)
    consumer.close()
    stats = admin.get(f"/admin/v2/persistent/{_path(topic)}/stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0  # left-out messages count as read


def test_batches_keep_only_their_retained_messages(
    client: pulsar.Client, admin: AdminHttp, topic: str
) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=100, batching_max_publish_delay_ms=500
    )
    for i in range(30):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 3}")
    producer.flush()
    producer.close()
    compact(admin, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert sorted(_keyed(_read_all(reader))) == [("k0", b"v27"), ("k1", b"v28"), ("k2", b"v29")]


def test_a_second_run_builds_on_the_first_and_survives_a_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    server = StandaloneProcess(tmp_path_factory.mktemp("standalone")).start()
    try:
        admin = AdminHttp(server.http_url)
        topic = unique("persistent://public/default/compact-restart")
        client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=10)
        _send(client, topic, [("x", b"x1"), ("y", b"y1"), ("x", b"x2")])
        compact(admin, topic)
        _send(client, topic, [("y", None), ("z", b"z1"), ("x", b"x3")])
        compact(admin, topic)
        ledgers = admin.get(f"/admin/v2/persistent/{_path(topic)}/internal-stats")
        client.close()
        server.kill()
        server.start()
        client = pulsar.Client(server.pulsar_url, operation_timeout_seconds=10)
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        assert _keyed(_read_all(reader)) == [("z", b"z1"), ("x", b"x3")]
        after = admin.get(f"/admin/v2/persistent/{_path(topic)}/internal-stats")
        assert after["compactedLedger"] == ledgers["compactedLedger"]
        assert after["compactedLedger"]["entries"] >= 1
        client.close()
    finally:
        server.stop()


async def test_read_compacted_is_refused_on_shared(
    standalone: StandaloneProcess, topic: str
) -> None:
    # the client refuses it itself (InvalidConfiguration): ask on the wire
    async with RawConnection.open(standalone.pulsar_port) as conn:
        subscribe = pb.CommandSubscribe(
            topic=topic,
            subscription="s",
            sub_type=pb.CommandSubscribe.SubType.Shared,
            consumer_id=1,
            request_id=1,
            read_compacted=True,
        )
        reply = await conn.request(T.SUBSCRIBE, subscribe=subscribe)
    assert reply.type == T.ERROR
    assert reply.error.error == pb.ServerError.NotAllowedError
    assert "Exclusive and Failover" in reply.error.message


def test_the_namespace_threshold_compacts_automatically(
    client: pulsar.Client, admin: AdminHttp
) -> None:
    ns = unique("public/compact")
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}")
    admin.ok("PUT", f"/admin/v2/namespaces/{ns}/compactionThreshold", 1000)
    assert admin.get(f"/admin/v2/namespaces/{ns}/compactionThreshold") == 1000
    admin.refused("PUT", f"/admin/v2/namespaces/{ns}/compactionThreshold", -1)
    topic = f"persistent://{ns}/t"
    _send(client, topic, [(f"k{i % 2}", b"x" * 100) for i in range(20)])  # > 1000 bytes
    url = f"/admin/v2/persistent/{ns}/t/compaction"
    wait_until(lambda: admin.get(url)["status"] == "SUCCESS", "the automatic compaction")


def test_trigger_on_a_missing_topic_is_404(admin: AdminHttp) -> None:
    reply = admin.call("PUT", "/admin/v2/persistent/public/default/no-such-topic-x/compaction")
    assert reply.status == 404 and reply.reason


def test_table_view_follows_puts_and_tombstones(client: pulsar.Client, topic: str) -> None:
    _send(client, topic, [("k1", b"one"), ("k2", b"two")])
    view = client.create_table_view(topic)
    try:
        assert view.get("k1") == b"one" and view.get("k2") == b"two"
        _send(client, topic, [("k1", None), ("k2", b"TWO")])
        wait_until(lambda: view.get("k1") is None and view.get("k2") == b"TWO", "the table view")
    finally:
        view.close()


def test_a_consumer_not_reading_compacted_gets_everything(
    client: pulsar.Client, admin: AdminHttp, topic: str
) -> None:
    _send(client, topic, [("a", b"1"), ("a", b"2")])
    compact(admin, topic)
    consumer = client.subscribe(topic, "plain", initial_position=EARLIEST)
    assert drain(consumer) == [b"1", b"2"]
    assert_nothing_more(consumer)


def test_the_cli_compacts_and_reports(
    client: pulsar.Client, standalone: StandaloneProcess, topic: str
) -> None:
    _send(client, topic, [("a", b"1"), ("a", b"2")])
    url = standalone.http_url
    done = magnetar("admin", "--url", url, "--json", "topics", "compact", topic, "--wait")
    assert done.code == 0 and json.loads(done.out)["status"] == "SUCCESS", str(done)
    status = magnetar("admin", "--url", url, "--json", "topics", "compaction-status", topic)
    assert json.loads(status.out) == {"status": "SUCCESS", "lastError": ""}, str(status)
    missing = magnetar("admin", "--url", url, "topics", "compact", topic + "-missing")
    assert missing.code != 0 and "does not exist" in missing.err, str(missing)


def test_a_partitioned_topic_compacts_every_partition(
    client: pulsar.Client, admin: AdminHttp
) -> None:
    name = unique("public/default/compact-parts")
    admin.ok("PUT", f"/admin/v2/persistent/{name}/partitions", 2)
    topic = f"persistent://{name}"
    _send(client, topic, [(f"k{i % 4}", f"v{i}".encode()) for i in range(12)])
    compact(admin, topic)
    reader = client.create_reader(
        f"{topic}-partition-0", pulsar.MessageId.earliest, is_read_compacted=True
    )
    first = _keyed(_read_all(reader))
    reader = client.create_reader(
        f"{topic}-partition-1", pulsar.MessageId.earliest, is_read_compacted=True
    )
    assert sorted(first + _keyed(_read_all(reader))) == [
        ("k0", b"v8"),
        ("k1", b"v9"),
        ("k2", b"v10"),
        ("k3", b"v11"),
    ]
