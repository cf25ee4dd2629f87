"""A property of the whole ingest path: every acknowledged message is stored, exactly once
where the producer's protocol promises it (issue 12, item 4).

Each seed draws a random program of steps on one topic: Pulsar producers (named or not,
batched or not), Kafka producers (idempotent or not), deduplication switched on and off,
clean restarts, and SIGKILLs that land while a producer is mid-stream and whose client lives
on and resends. At the end every message is read back and checked:

- every message a client reported as sent is stored (never an id of −1 for a message that
  is not stored);
- a message sent while deduplication was on by a Pulsar producer, or by an idempotent Kafka
  producer, is stored exactly once, also when its client resent it after a crash;
- without those promises (dedup off, a plain Kafka producer), a resend after a crash may be
  stored twice — Pulsar's and Kafka's at-least-once — but nothing that was not sent is stored.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import KafkaError, Producer

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

SEEDS = [1, 2, 3, 4]
STEPS = 8
MESSAGES = 400
TIMEOUT_MS = 15_000


@dataclass
class Ledger:
    """What the clients were told: sent (acknowledged) and failed payloads, and which
    payloads carry an exactly-once promise."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: set[bytes] = field(default_factory=set)
    failed: set[bytes] = field(default_factory=set)
    exactly_once: set[bytes] = field(default_factory=set)
    issued: set[bytes] = field(default_factory=set)

    def result(self, payload: bytes, ok: bool) -> None:
        with self.lock:
            (self.sent if ok else self.failed).add(payload)


@dataclass
class World:
    server: StandaloneProcess
    topic: str
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    dedup: bool = False
    step: int = 0
    program: list[str] = field(default_factory=list)  # what ran, for the failure message

    def payloads(self, tag: str) -> list[bytes]:
        out = [f"{self.step}-{tag}-{i}".encode() for i in range(MESSAGES)]
        self.ledger.issued.update(out)
        return out


def _set_dedup(server: StandaloneProcess, enabled: bool) -> None:
    req = urllib.request.Request(
        f"{server.http_url}/admin/v2/namespaces/public/default/deduplication",
        data=json.dumps(enabled).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)


def _pulsar_send(w: World, payloads: list[bytes], crash: threading.Event | None) -> None:
    client = pulsar.Client(
        w.server.pulsar_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        name = w.rng.choice([None, f"named-{w.rng.randrange(3)}"])
        batched = w.rng.random() < 0.5
        producer = client.create_producer(
            f"persistent://public/default/{w.topic}",
            producer_name=name,
            batching_enabled=batched,
            batching_max_messages=20,
            block_if_queue_full=True,
            send_timeout_millis=60_000,
        )
        if w.dedup:
            w.ledger.exactly_once.update(payloads)
        w.program.append(f"pulsar(name={name}, batched={batched})")

        def callback(payload: bytes):  # type: ignore[no-untyped-def]
            def done(result: pulsar.Result, _: pulsar.MessageId) -> None:
                w.ledger.result(payload, result == pulsar.Result.Ok)

            return done

        for i, payload in enumerate(payloads):
            producer.send_async(payload, callback(payload))
            if crash is not None and i == len(payloads) // 2:
                crash.set()
        producer.flush()
        producer.close()
    finally:
        client.close()


def _kafka_send(w: World, payloads: list[bytes], crash: threading.Event | None) -> None:
    idempotent = w.rng.random() < 0.5
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{w.server.kafka_port}",
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": w.rng.choice([0, 5]),
            "batch.num.messages": 50,
            "max.in.flight.requests.per.connection": 5,
            "message.timeout.ms": 60_000,
            "log_level": 0,  # the refused connections during a restart are expected
        }
    )
    if idempotent:
        w.ledger.exactly_once.update(payloads)
    w.program.append(f"kafka(idempotent={idempotent})")

    def report(err: KafkaError | None, msg: object) -> None:
        w.ledger.result(msg.value(), err is None)  # type: ignore[attr-defined]

    for i, payload in enumerate(payloads):
        producer.produce(w.topic, value=payload, on_delivery=report)
        producer.poll(0)
        if crash is not None and i == len(payloads) // 2:
            producer.flush(5)  # some of it acknowledged before the kill
            crash.set()
    assert producer.flush(90) == 0


def _send(w: World, *, kill: bool) -> None:
    sender = w.rng.choice([_pulsar_send, _kafka_send])
    payloads = w.payloads(sender.__name__)
    if not kill:
        sender(w, payloads, None)
        return
    crash = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sender(w, payloads, crash)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    assert crash.wait(60), "the producer never got half way"
    w.server.kill()
    w.server.start()  # same ports: the client reconnects and resends what is pending
    thread.join(120)
    assert not thread.is_alive(), "the producer did not finish after the restart"
    assert errors == []


def _step(w: World) -> None:
    action = w.rng.choices(["send", "kill", "dedup", "restart"], weights=[4, 2, 2, 1])[0]
    w.program.append(action if action != "dedup" else f"dedup={not w.dedup}")
    if action == "send":
        _send(w, kill=False)
    elif action == "kill":
        _send(w, kill=True)
    elif action == "dedup":
        w.dedup = not w.dedup
        _set_dedup(w.server, w.dedup)
    else:
        w.server.stop()
        w.server.start()


def _stored(server: StandaloneProcess, topic: str) -> Counter[bytes]:
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(
            f"persistent://public/default/{topic}", pulsar.MessageId.earliest
        )
        seen: Counter[bytes] = Counter()
        while reader.has_message_available():
            seen[reader.read_next(TIMEOUT_MS).data()] += 1
        return seen
    finally:
        client.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_acknowledged_message_is_stored_exactly_as_promised(
    tmp_path: Path, seed: int
) -> None:
    server = StandaloneProcess(tmp_path / "data").start()
    w = World(server, f"ingest-{seed}-{uuid.uuid4().hex[:6]}", random.Random(seed))
    try:
        for w.step in range(STEPS):
            _step(w)
        _send(w, kill=False)  # at least one send in every program
        stored = _stored(server, w.topic)
    finally:
        server.stop()
    program = " → ".join(w.program)
    lost = w.ledger.sent - set(stored)
    assert not lost, f"{len(lost)} acknowledged lost, e.g. {sorted(lost)[:5]}; {program}"
    twice = {p for p in w.ledger.exactly_once if stored[p] > 1}
    assert not twice, f"{len(twice)} stored twice, e.g. {sorted(twice)[:5]}; {program}"
    strangers = set(stored) - w.ledger.issued
    assert not strangers, f"stored messages nobody sent: {sorted(strangers)[:5]}"
    assert w.ledger.sent, "the program acknowledged nothing"
