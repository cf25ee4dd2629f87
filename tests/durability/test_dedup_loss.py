"""Acknowledged messages must never be dropped as duplicates (issue 12, "silent loss").

With deduplication on, the broker answers a message it judges a duplicate with id −1:−1 (Pulsar)
or the original offset (Kafka), and the client counts it as sent. A wrong judgement is silent
data loss, so each test here drives the real clients and then reads everything back:

- non-idempotent Kafka batches carry no sequence and are never deduplicated, whatever the
  namespace policy; idempotent ones are deduplicated on (producer id, epoch, sequence) only;
- broker-generated Pulsar producer names are unique for the life of the data directory, so a
  new producer after a restart never inherits an old producer's sequence ids.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

TIMEOUT_S = 30.0


def _set_dedup(server: StandaloneProcess, namespace: str, enabled: bool) -> None:
    req = urllib.request.Request(
        f"{server.http_url}/admin/v2/namespaces/{namespace}/deduplication",
        data=json.dumps(enabled).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    proc = StandaloneProcess(tmp_path_factory.mktemp("dedup-loss")).start()
    _set_dedup(proc, "public/default", True)
    try:
        yield proc
    finally:
        proc.stop()


def _produce_kafka(
    server: StandaloneProcess, topic: str, n: int, **conf: object
) -> list[int | None]:
    """Send ``n`` values ``0..n-1``; the offsets the delivery reports gave (all must be OK)."""
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
            "linger.ms": 0,
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
            **conf,
        }
    )
    offsets: list[int | None] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=str(i).encode(), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    return offsets


def _consume_kafka(server: StandaloneProcess, topic: str, n: int) -> Counter[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: Counter[bytes] = Counter()
    idle = 0
    try:
        while sum(seen.values()) < n or idle < 3:
            batch = consumer.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            if not batch and sum(seen.values()) < n and idle > TIMEOUT_S:
                break
            for msg in batch:
                assert msg.error() is None, msg.error()
                seen[msg.value()] += 1
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kafka_batches_are_never_dropped_under_pulsar_dedup(
    server: StandaloneProcess, idempotent: bool
) -> None:
    """The issue's reproduction: 20,000 messages, acks=all, 5 requests in flight, dedup on.
    Before the fix 16,000 were acknowledged and missing, with offsets of −1."""
    topic = f"kafka-dedup-{uuid.uuid4().hex[:8]}"
    n = 20_000
    conf: dict[str, object] = {"acks": "all", "enable.idempotence": idempotent}
    offsets = _produce_kafka(server, topic, n, **conf)
    assert len(offsets) == n
    # confluent-kafka reports offset −1 (OFFSET_INVALID) as None
    assert all(o is not None and o >= 0 for o in offsets), "a report carried offset -1"
    assert len(set(offsets)) == n
    seen = _consume_kafka(server, topic, n)
    assert seen == Counter(str(i).encode() for i in range(n))


def _pulsar_client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _read_all(server: StandaloneProcess, topic: str) -> list[bytes]:
    client = _pulsar_client(server)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(10_000).data())
        return out
    finally:
        client.close()


def test_generated_producer_names_never_repeat_across_restarts(tmp_path: Path) -> None:
    """Producer A (no name) sends 100 and the server is killed; after the restart a new,
    unrelated producer B must not get A's name (and with it A's last sequence id), or its
    messages are answered −1:−1 and never stored."""
    topic = f"persistent://public/default/names-{uuid.uuid4().hex[:8]}"
    server = StandaloneProcess(tmp_path / "data").start()
    names = set()
    try:
        _set_dedup(server, "public/default", True)
        client = _pulsar_client(server)
        a = client.create_producer(topic, batching_enabled=False)
        names.add(a.producer_name())
        for i in range(100):
            a.send(f"a-{i}".encode())
        client.close()
        server.kill()
        server = StandaloneProcess(server.data_dir).start()
        client = _pulsar_client(server)
        try:
            b = client.create_producer(topic, batching_enabled=False)
            assert b.producer_name() not in names
            names.add(b.producer_name())
            assert b.last_sequence_id() == -1
            ids = [b.send(f"b-{i}".encode()) for i in range(50)]
            assert all(m.entry_id() >= 0 for m in ids), "a new producer's send answered -1:-1"
            c = client.create_producer(topic, batching_enabled=False)
            assert c.producer_name() not in names
        finally:
            client.close()
        stored = _read_all(server, topic)
        assert stored == [f"a-{i}".encode() for i in range(100)] + [
            f"b-{i}".encode() for i in range(50)
        ]
    finally:
        server.stop()


def test_a_named_producer_keeps_pulsar_semantics(server: StandaloneProcess) -> None:
    """A producer that gives its own name is deduplicated on it, across reconnects."""
    topic = f"persistent://public/default/named-{uuid.uuid4().hex[:8]}"
    client = _pulsar_client(server)
    try:
        p = client.create_producer(topic, producer_name="mine", batching_enabled=False)
        for i in range(10):
            p.send(f"m-{i}".encode(), sequence_id=i)
        p.close()
        p = client.create_producer(topic, producer_name="mine", batching_enabled=False)
        assert p.producer_name() == "mine"
        assert p.last_sequence_id() == 9
        again = p.send(b"m-9", sequence_id=9)  # a retry of a stored message
        assert again.entry_id() == -1
        p.send(b"m-10", sequence_id=10)
    finally:
        client.close()
    assert _read_all(server, topic) == [f"m-{i}".encode() for i in range(11)]


def test_sequence_ids_reused_after_a_reconnect_are_new_messages(tmp_path: Path) -> None:
    """The C++ client (and so the Python one) adopts the broker's last sequence id on EVERY
    reconnect until it has had one receipt (pulsar-client-cpp ProducerImpl; the Java client
    fixed the same in apache/pulsar#2047). A producer whose first messages were in flight
    when the broker was killed resends them under their ids and then numbers its next
    messages from the broker's answer again, reusing those ids for different messages.
    They must be stored, not answered −1:−1 as duplicates of the resends."""
    topic = f"persistent://public/default/reuse-{uuid.uuid4().hex[:8]}"
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        _set_dedup(server, "public/default", True)
        client = pulsar.Client(
            server.pulsar_url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
            receipts: list[tuple[bytes, pulsar.MessageId | None]] = []
            done = threading.Semaphore(0)

            def sent(payload: bytes) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
                def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
                    ok = result == pulsar.Result.Ok
                    receipts.append((payload, msg_id if ok else None))
                    done.release()

                return callback

            server.pause()  # the first messages reach the socket, never the ledger
            first = [f"first-{i}".encode() for i in range(10)]
            for payload in first:
                producer.send_async(payload, sent(payload))
            time.sleep(0.5)
            server.kill()
            server = StandaloneProcess(
                server.data_dir,
                pulsar_port=server.pulsar_port,
                http_port=server.http_port,
                kafka_port=server.kafka_port,
                flight_port=server.flight_port,
            ).start()
            for _ in first:
                assert done.acquire(timeout=TIMEOUT_S), "a resend got no receipt"
            after = [f"after-{i}".encode() for i in range(10)]
            for payload in after:
                producer.send_async(payload, sent(payload))
            for _ in after:
                assert done.acquire(timeout=TIMEOUT_S), "a message got no receipt"
        finally:
            client.close()
        assert all(msg_id is not None for _, msg_id in receipts), receipts
        dropped = [p for p, msg_id in receipts if msg_id is not None and msg_id.entry_id() < 0]
        assert dropped == [], f"answered -1:-1 and never stored: {dropped}"
        assert _read_all(server, topic) == first + after
    finally:
        server.stop()
