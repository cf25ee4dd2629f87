"""A property of the whole ingest path (issue 12, item 4): every acknowledged message is
stored exactly as its producer's contract promises; every message is acknowledged or gets an
error; an id of −1 answers only a real resend of a stored message.

Each seed draws a program of rounds against one real ``magnetar standalone``. In a round,
four to six producers publish CONCURRENTLY (one thread each, up to ``WINDOW`` sends awaiting
their callback): Pulsar producers (named or generated name, batched or not, sharing one
client) and confluent-kafka producers (idempotent or not), each to the plain topic or to the
two-partition topic, which both protocols share. Deduplication is set on or off for the
round (admin REST). Each seed has one round in which the server is SIGKILLed mid-stream,
one in which it is SIGTERMed mid-stream, and one undisturbed; it is restarted on the same
ports and the live clients reconnect and resend what they hold no receipt for. Between
rounds, and before the final read, it is restarted by SIGTERM or SIGKILL (acknowledged must
mean durable).

Every callback is recorded (``ingest_outcomes``). At the end everything is read back twice,
by a Pulsar reader per partition from the earliest and by a Kafka consumer per partition
from offset 0, and the test asserts:

1. Outcomes: every message handed to a client got exactly one callback, and none is an
   error (the clients retry for longer than any outage here, so nothing justifies one).
2. Receipts: an acknowledged message's Pulsar id (partition, ledger, entry, batch index) or
   Kafka (partition, offset) is where the read finds that very payload.
3. −1 only for a real retry. Whether a callback answers the first attempt or a resend is
   not visible to the test; what is checkable, and asserted: a receipt of −1 (Pulsar −1:−1,
   Kafka offset −1/invalid) comes only from a producer with an exactly-once promise (Pulsar
   with deduplication on, idempotent Kafka), only for a message handed to its client before
   a restart or kill of its round (a message handed over later was never on the wire to the
   old server, so its first attempt cannot be a duplicate: a −1 for it is a first attempt
   judged a duplicate of someone else's message), and the payload is stored (payloads are
   unique, so the stored copy is this message's earlier attempt). With check 4 this rules
   out the silent loss of issue 12 items 1 and 2.
4. Storage: every acknowledged message is stored; with an exactly-once promise no message
   (acknowledged or not) is stored twice; without it (Pulsar with deduplication off, plain
   Kafka: at-least-once) a message may be stored twice only if it was handed over before a
   restart or kill of its round (in an undisturbed round everything is stored once);
   nothing is stored that no producer sent; Pulsar and Kafka reads agree exactly.
5. Order: for Pulsar producers and idempotent Kafka producers, the first copies of a
   producer's messages in each partition are in the order it sent them.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from magnetar.testing.server import StandaloneProcess
from tests.durability.ingest_outcomes import Outcome, OutcomeBook, Position, ProducerSpec

pytestmark = pytest.mark.slow

SEEDS = [1, 2, 3]
WINDOW = 64  # sends awaiting a callback per producer: the stream is still going at the kill
PARTITIONS = 2
TIMEOUT_S = 90.0
NAMESPACE = "public/default"

Stored = dict[str, list[tuple[bytes, tuple[int, ...]]]]  # physical topic -> (payload, id)


@dataclass
class Program:
    """One seed's run: the server, the topics, and what happened so far."""

    server: StandaloneProcess
    rng: random.Random
    plain: str
    parted: str
    book: OutcomeBook = field(default_factory=lambda: OutcomeBook(WINDOW))
    specs: list[ProducerSpec] = field(default_factory=list)
    round_end: dict[str, int] = field(default_factory=dict)  # tag -> disruptions at round end
    log: list[str] = field(default_factory=list)

    def physical(self, topic: str, partition: int) -> str:
        return f"{topic}-partition-{partition}" if topic == self.parted else topic

    def physical_topics(self) -> list[str]:
        return [self.plain, *(self.physical(self.parted, p) for p in range(PARTITIONS))]


def _admin(server: StandaloneProcess, method: str, path: str, body: object) -> None:
    req = urllib.request.Request(
        f"{server.http_url}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204), resp.status


def _set_dedup(server: StandaloneProcess, enabled: bool) -> None:
    _admin(server, "POST", f"/admin/v2/namespaces/{NAMESPACE}/deduplication", enabled)


def _pulsar_client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


# -- producers -------------------------------------------------------------------------------


def _pulsar_receipt(book: OutcomeBook, payload: bytes) -> Callable[..., None]:
    def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            book.done(payload, Outcome(False, error=str(result)))
            return
        position: Position = None
        if msg_id.ledger_id() >= 0 and msg_id.entry_id() >= 0:
            position = (msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id())
            position += (msg_id.batch_index(),)
        book.done(payload, Outcome(True, position))

    return done


def _run_pulsar(
    spec: ProducerSpec, client: pulsar.Client, book: OutcomeBook, go: threading.Event
) -> None:
    go.wait()
    producer = client.create_producer(
        f"persistent://{NAMESPACE}/{spec.topic}",
        producer_name=f"named-{spec.tag[spec.tag.index('p') :]}" if spec.named else None,
        batching_enabled=spec.batched,
        batching_max_messages=16,
        batching_max_publish_delay_ms=2,
        block_if_queue_full=True,
        send_timeout_millis=int(TIMEOUT_S * 1000),
    )
    for i in range(spec.count):
        payload = spec.payload(i)
        book.hand(spec, payload)
        producer.send_async(payload, _pulsar_receipt(book, payload))
    producer.flush()
    assert book.wait_for_outcomes(spec, TIMEOUT_S), f"{spec.describe()}: flushed, no outcome"
    producer.close()


def _run_kafka(spec: ProducerSpec, port: int, book: OutcomeBook, go: threading.Event) -> None:
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "enable.idempotence": spec.idempotent,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 20,
            "max.in.flight.requests.per.connection": 5,
            "message.timeout.ms": int(TIMEOUT_S * 1000),
            "log_level": 0,  # refused connections during a restart are expected
        }
    )

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            book.done(msg.value(), Outcome(False, error=str(err)))
            return
        offset = msg.offset()
        position = (msg.partition(), offset) if offset is not None and offset >= 0 else None
        book.done(msg.value(), Outcome(True, position))

    go.wait()
    for i in range(spec.count):
        payload = spec.payload(i)
        while book.pending[spec.tag] >= book.window:
            producer.poll(0.01)
        book.hand(spec, payload)
        producer.produce(spec.topic, value=payload, on_delivery=report)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, f"{spec.describe()}: flush left messages"
    assert book.wait_for_outcomes(spec, 1), f"{spec.describe()}: flushed, no outcome"


# -- the program -----------------------------------------------------------------------------


def _draw_producers(p: Program, round_no: int, dedup: bool) -> list[ProducerSpec]:
    """Four to six producers, at least one of each protocol from the start and one late."""
    rng = p.rng
    specs = []
    n = rng.randint(4, 6)
    for slot in range(n):
        protocol = (
            "pulsar" if slot == 0 else "kafka" if slot == 1 else rng.choice(["pulsar", "kafka"])
        )
        specs.append(
            ProducerSpec(
                tag=f"r{round_no}p{slot}",
                protocol=protocol,
                topic=rng.choice([p.plain, p.parted]),
                count=rng.randint(150, 300),
                named=rng.random() < 0.5,
                batched=rng.random() < 0.5,
                idempotent=rng.random() < 0.5,
                dedup=dedup,
                late=slot == n - 1 or (slot >= 2 and rng.random() < 0.4),
            )
        )
    return specs


def _restart(p: Program, how: str) -> int:
    """SIGKILL or SIGTERM the server and start it again on the same ports; returns how
    many messages were awaiting their callback when it went down."""
    if how == "kill":
        p.server.kill()
    else:
        p.server.stop()
    # Counted after the fact: a message handed over before it is exposed to a resend.
    in_flight = p.book.disrupted()
    p.server.start()
    return in_flight


def _run_round(p: Program, round_no: int, dedup: bool, disruption: str) -> None:
    _set_dedup(p.server, dedup)
    specs = _draw_producers(p, round_no, dedup)
    p.specs += specs
    p.log.append(
        f"round {round_no} dedup={dedup} {disruption}: " + ", ".join(s.describe() for s in specs)
    )
    go, late_go = threading.Event(), threading.Event()
    errors: list[str] = []
    client = _pulsar_client(p.server)
    try:
        threads = [_start(spec, p, client, late_go if spec.late else go, errors) for spec in specs]
        go.set()
        total = sum(s.count for s in specs if not s.late)
        at = p.book.acked + p.rng.randint(total // 5, total // 2)
        assert p.book.wait_for_acks(at, TIMEOUT_S), f"stuck before the {disruption}"
        if disruption != "none":
            in_flight = _restart(p, disruption)
            p.log.append(f"{disruption} with {in_flight} messages in flight")
            assert in_flight > 0, f"the {disruption} landed after the stream"
        late_go.set()  # new producers join the live ones (after the restart, if any)
        for t in threads:
            t.join(2 * TIMEOUT_S)
            assert not t.is_alive(), f"a producer did not finish: {p.log[-1]}"
    finally:
        client.close()
    assert errors == [], errors
    p.round_end.update({s.tag: p.book.disruptions for s in specs})


def _start(
    spec: ProducerSpec,
    p: Program,
    client: pulsar.Client,
    go: threading.Event,
    errors: list[str],
) -> threading.Thread:
    def run() -> None:
        try:
            if spec.protocol == "pulsar":
                _run_pulsar(spec, client, p.book, go)
            else:
                _run_kafka(spec, p.server.kafka_port, p.book, go)
        except BaseException as e:  # reported in the test's thread
            errors.append(f"{spec.describe()}: {e!r}")

    thread = threading.Thread(target=run, name=spec.tag, daemon=True)
    thread.start()
    return thread


# -- reading back ----------------------------------------------------------------------------


def _read_pulsar(p: Program) -> Stored:
    client = _pulsar_client(p.server)
    stored: Stored = {}
    try:
        for topic in p.physical_topics():
            reader = client.create_reader(
                f"persistent://{NAMESPACE}/{topic}", pulsar.MessageId.earliest
            )
            out = stored[topic] = []
            while reader.has_message_available():
                msg = reader.read_next(int(TIMEOUT_S * 1000))
                i = msg.message_id()
                out.append((msg.data(), (i.ledger_id(), i.entry_id(), i.batch_index())))
            reader.close()
    finally:
        client.close()
    return stored


def _read_kafka(p: Program) -> Stored:
    consumer = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{p.server.kafka_port}",
            "group.id": "ingest-check",
            "enable.auto.commit": False,
        }
    )
    stored: Stored = {}
    try:
        for topic, partition in [(p.plain, 0), *((p.parted, i) for i in range(PARTITIONS))]:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            out = stored[p.physical(topic, partition)] = []
            while len(out) < high:
                msg = consumer.poll(TIMEOUT_S)
                assert msg is not None and msg.error() is None, f"{topic}[{partition}]: {msg}"
                out.append((msg.value(), (msg.offset(),)))
    finally:
        consumer.close()
    return stored


# -- the checks ------------------------------------------------------------------------------


def _check_outcomes(p: Program) -> dict[bytes, Outcome]:
    """Check 1: exactly one callback per message handed over, and no error."""
    book = p.book
    missing = [m for m in book.handed if m not in book.outcomes]
    assert not missing, f"{len(missing)} messages without an outcome, e.g. {missing[:5]}"
    twice = {m: o for m, o in book.outcomes.items() if len(o) != 1}
    assert not twice, f"messages with several callbacks: {list(twice.items())[:3]}"
    failed = {m: o[0].error for m, o in book.outcomes.items() if not o[0].ok}
    assert not failed, f"{len(failed)} failed sends, e.g. {list(failed.items())[:5]}"
    return {m: o[0] for m, o in book.outcomes.items()}


def _check_receipts(
    p: Program, outcomes: dict[bytes, Outcome], pulsar_read: Stored, kafka_read: Stored
) -> None:
    """Check 2 and 3: a receipt points at its payload; −1 only for an exposed resend."""
    at: dict[tuple[str, tuple[int, ...]], bytes] = {}
    for name, read in (("pulsar", pulsar_read), ("kafka", kafka_read)):
        for topic, messages in read.items():
            at.update({(f"{name}:{topic}", pos): m for m, pos in messages})
    stored = {m for messages in pulsar_read.values() for m, _ in messages}
    wrong, bad_minus_one = [], []
    for m, outcome in outcomes.items():
        handed = p.book.handed[m]
        spec = handed.spec
        if outcome.position is None:
            exposed = handed.epoch < p.round_end[spec.tag]
            if not (spec.exactly_once and exposed and m in stored):
                bad_minus_one.append((m, spec.describe(), handed.epoch, p.round_end[spec.tag]))
            continue
        partition, *pos = outcome.position
        topic = p.physical(spec.topic, partition)
        if at.get((f"{spec.protocol}:{topic}", tuple(pos))) != m:
            wrong.append((m, spec.describe(), outcome.position))
    assert not bad_minus_one, (
        f"{len(bad_minus_one)} receipts of -1 for no stored resend: {bad_minus_one[:5]}"
    )
    assert not wrong, f"{len(wrong)} receipts point elsewhere: {wrong[:5]}"


def _check_storage(
    p: Program, outcomes: dict[bytes, Outcome], pulsar_read: Stored, kafka_read: Stored
) -> None:
    """Check 4: stored, once where promised, duplicates only for exposed messages."""
    for topic in p.physical_topics():
        assert [m for m, _ in pulsar_read[topic]] == [m for m, _ in kafka_read[topic]], (
            f"{topic}: Pulsar and Kafka reads differ"
        )
    counts = Counter(m for messages in pulsar_read.values() for m, _ in messages)
    strangers = set(counts) - set(p.book.handed)
    assert not strangers, f"stored messages nobody sent: {sorted(strangers)[:5]}"
    lost = sorted(m for m, o in outcomes.items() if o.ok and counts[m] == 0)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    twice = []
    for m, n in counts.items():
        handed = p.book.handed[m]
        exposed = handed.epoch < p.round_end[handed.spec.tag]
        if n > 1 and (handed.spec.exactly_once or not exposed):
            twice.append((m, n, handed.spec.describe(), handed.epoch))
    assert not twice, f"{len(twice)} stored more than promised, e.g. {twice[:5]}"


def _check_order(p: Program, pulsar_read: Stored) -> None:
    """Check 5: each ordered producer's first copies in a partition are in send order."""
    specs = {s.tag: s for s in p.specs}
    for topic, messages in pulsar_read.items():
        seen: set[bytes] = set()
        last: dict[str, int] = defaultdict(lambda: -1)
        for m, _ in messages:
            if m in seen:
                continue
            seen.add(m)
            tag, _, index = m.decode().rpartition("-")
            if specs[tag].ordered:
                assert int(index) > last[tag], f"{topic}: {m!r} after index {last[tag]}"
            last[tag] = int(index)


@dataclass
class Schedule:
    dedup: list[bool]
    during: list[str]  # the disruption inside each round
    between: list[str]  # after each round (the last one: before the read)


def _schedule(rng: random.Random) -> Schedule:
    dedup = [True, False, rng.random() < 0.5]
    during = ["kill", "term", "none"]
    rng.shuffle(dedup)
    rng.shuffle(during)
    between = [rng.choice(["none", "term", "kill"]), rng.choice(["none", "term", "kill"]), "kill"]
    return Schedule(dedup, during, between)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_acknowledged_message_is_stored_as_promised(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    server = StandaloneProcess(tmp_path / "data").start()
    p = Program(server, rng, plain=f"plain-{seed}", parted=f"parted-{seed}")
    try:
        path = f"/admin/v2/persistent/{NAMESPACE}/{p.parted}/partitions"
        _admin(server, "PUT", path, PARTITIONS)
        schedule = _schedule(rng)
        for round_no, (dedup, during, between) in enumerate(
            zip(schedule.dedup, schedule.during, schedule.between, strict=True)
        ):
            _run_round(p, round_no, dedup, during)
            p.log.append(f"then {between}")
            if between != "none":
                _restart(p, between)
        pulsar_read, kafka_read = _read_pulsar(p), _read_kafka(p)
    finally:
        server.stop()
        print(f"seed {seed}:", *p.log, sep="\n")  # shown by pytest when the test fails
    outcomes = _check_outcomes(p)
    _check_receipts(p, outcomes, pulsar_read, kafka_read)
    _check_storage(p, outcomes, pulsar_read, kafka_read)
    _check_order(p, pulsar_read)
    print(_summary(outcomes, pulsar_read))


def _summary(outcomes: dict[bytes, Outcome], pulsar_read: Stored) -> str:
    counts = Counter(m for messages in pulsar_read.values() for m, _ in messages)
    minus_one = sum(o.position is None for o in outcomes.values())
    twice = sum(n > 1 for n in counts.values())
    return f"{len(outcomes)} acknowledged, {minus_one} with -1, {twice} stored twice"
