"""SIGKILL a real standalone under the official pulsar-client, restart it on the same data
directory, and check what survived.

- Acknowledged sends: every message whose send callback reported Ok is stored exactly once,
  and each producer's messages are a gap-free prefix of what it sent, through repeated kills
  that land while sends are in flight. The client is closed before the restart: a live one
  would resend its pending messages, which without deduplication are duplicates by design.
- Deduplication: the producer's last sequence id survives the kill, a re-created producer
  goes on where it stopped, re-sent sequence ids are dropped, and a client that lives
  through the crash and resends gets every message stored exactly once.
- Cursors: a durable subscription resumes at its first unacknowledged message, with
  individual acks (holes included) and cumulative acks, each confirmed by closing the
  consumer right before the kill.
"""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import READY, StandaloneProcess

pytestmark = pytest.mark.slow

TIMEOUT_MS = 10_000
ROUNDS = 3
PRODUCERS = 2
IN_FLIGHT = 200  # sends awaiting their receipt: the kill always lands mid-stream
KILL_AFTER_ACKS = 600
CRASH_TOPIC = "persistent://public/default/crash"


@contextmanager
def pulsar_client(
    server: StandaloneProcess, *, outlives_server: bool = False
) -> Iterator[pulsar.Client]:
    """A client closed on exit. ``outlives_server``: the server is killed before the client
    closes, so closing its producers fails with NotConnected (the client still shuts down)."""
    client = pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield client
    finally:
        if outlives_server:
            with suppress(pulsar.NotConnected):
                client.close()
        else:
            client.close()


def start(server: StandaloneProcess) -> None:
    """Start (or restart) ``server``; fail loudly if it did not come up serving."""
    server.output.clear()
    server.start()
    assert server.proc is not None and server.proc.poll() is None, "".join(server.output[-30:])
    assert any(READY in line for line in server.output), "".join(server.output[-30:])


@contextmanager
def running(server: StandaloneProcess) -> Iterator[StandaloneProcess]:
    start(server)
    try:
        yield server
    finally:
        server.stop()


def restart_after_sigkill(server: StandaloneProcess) -> None:
    server.kill()
    assert server.proc is not None and server.proc.returncode == -signal.SIGKILL
    start(server)


def read_until(client: pulsar.Client, topic: str, sentinel: bytes) -> list[bytes]:
    """Every payload of ``topic`` from the earliest, up to and including ``sentinel``."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        seen: list[bytes] = []
        while not seen or seen[-1] != sentinel:
            seen.append(reader.read_next(TIMEOUT_MS).data())
        return seen
    finally:
        reader.close()


def append_sentinel(client: pulsar.Client, topic: str, sentinel: bytes) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        producer.send(sentinel)
    finally:
        producer.close()


# -- (a) acknowledged sends survive SIGKILL --------------------------------------------------


class AckLog:
    """What the send callbacks reported; filled from the client's threads."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._acked: list[bytes] = []
        self._failed: list[tuple[bytes, pulsar.Result]] = []

    def callback(self, payload: bytes) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _: pulsar.MessageId) -> None:
            with self._changed:
                if result == pulsar.Result.Ok:
                    self._acked.append(payload)
                else:
                    self._failed.append((payload, result))
                self._changed.notify_all()

        return done

    def wait_for_room(self, sent: int) -> None:
        """Block until fewer than IN_FLIGHT of the ``sent`` messages await their callback."""
        with self._changed:
            room = self._changed.wait_for(
                lambda: sent - len(self._acked) - len(self._failed) < IN_FLIGHT, timeout=30
            )
        assert room, f"no send callback for 30 s ({len(self._acked)} of {sent} acked)"

    def acked(self) -> list[bytes]:
        with self._changed:
            return list(self._acked)

    def failed(self) -> list[tuple[bytes, pulsar.Result]]:
        with self._changed:
            return list(self._failed)


def payload_of(round_no: int, producer: int, index: int) -> bytes:
    return b"r%d-p%d-%05d" % (round_no, producer, index)


def stream_and_kill(
    server: StandaloneProcess, round_no: int, *, batching: bool
) -> tuple[set[bytes], set[bytes]]:
    """Stream sends from PRODUCERS producers with up to IN_FLIGHT awaiting their receipt,
    SIGKILL the server once KILL_AFTER_ACKS are acknowledged. Returns (sent, acked)."""
    log = AckLog()
    sent: set[bytes] = set()
    with pulsar_client(server, outlives_server=True) as client:
        producers = [
            client.create_producer(
                CRASH_TOPIC,
                batching_enabled=batching,
                batching_max_messages=20,
                batching_max_publish_delay_ms=1,
                send_timeout_millis=60_000,
            )
            for _ in range(PRODUCERS)
        ]
        index = 0
        while len(log.acked()) < KILL_AFTER_ACKS:
            log.wait_for_room(len(sent))
            for p, producer in enumerate(producers):
                payload = payload_of(round_no, p, index)
                producer.send_async(payload, log.callback(payload))
                sent.add(payload)
            index += 1
        failed_before_kill = log.failed()
        server.kill()
        assert not failed_before_kill, "sends failed while the server was up"
    # The client is closed: no callback can report Ok any more.
    acked = set(log.acked())
    assert len(acked) < len(sent), "nothing was in flight when the server was killed"
    return sent, acked


def check_stored(seen: list[bytes], acked: set[bytes], sent: set[bytes]) -> None:
    counts = Counter(seen)
    twice = sorted(m for m, n in counts.items() if n > 1)
    assert not twice, f"stored more than once: {twice[:5]} ({len(twice)} in all)"
    unknown = set(counts) - sent
    assert not unknown, f"messages nobody sent: {sorted(unknown)[:5]}"
    lost = acked - set(counts)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
    by_producer: dict[bytes, list[int]] = {}
    for m in seen:
        producer, _, index = m.rpartition(b"-")
        by_producer.setdefault(producer, []).append(int(index))
    for producer, indexes in by_producer.items():
        # The server appends a connection's sends in order: each producer's stored messages
        # are a gap-free prefix of what it sent, in order.
        assert indexes == list(range(len(indexes))), f"{producer!r} out of order or with gaps"


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_acknowledged_sends_survive_repeated_sigkill(tmp_path: Path, batching: bool) -> None:
    server = StandaloneProcess(tmp_path / "data")
    acked: set[bytes] = set()
    sent: set[bytes] = set()
    with running(server):
        for round_no in range(ROUNDS):
            sent_now, acked_now = stream_and_kill(server, round_no, batching=batching)
            sent |= sent_now
            acked |= acked_now
            start(server)
            sentinel = b"end-of-round-%d" % round_no
            with pulsar_client(server) as client:
                append_sentinel(client, CRASH_TOPIC, sentinel)
                seen = read_until(client, CRASH_TOPIC, sentinel)
            sentinels = {b"end-of-round-%d" % r for r in range(round_no + 1)}
            assert [m for m in seen if m in sentinels] == sorted(sentinels)
            check_stored([m for m in seen if m not in sentinels], acked, sent)


# -- (b) deduplication state survives SIGKILL ------------------------------------------------


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_deduplication_state_survives_sigkill(tmp_path: Path, batching: bool) -> None:
    topic = "persistent://public/default/dedup-crash"
    server = StandaloneProcess(tmp_path / "data", extra_args=["--deduplication", "true"])
    first = [b"first-%02d" % i for i in range(30)]
    later = [b"later-%02d" % i for i in range(10)]
    with running(server):
        with pulsar_client(server) as client:
            producer = client.create_producer(
                topic,
                producer_name="dedup-writer",
                batching_enabled=batching,
                batching_max_messages=8,
                batching_max_publish_delay_ms=60_000,
            )
            assert producer.last_sequence_id() == -1
            for m in first:
                producer.send_async(m, None)
            producer.flush()
            assert producer.last_sequence_id() == len(first) - 1
        restart_after_sigkill(server)
        with pulsar_client(server) as client:
            producer = client.create_producer(topic, producer_name="dedup-writer")
            # The broker told the client the highest sequence id it stored before the crash.
            assert producer.last_sequence_id() == len(first) - 1
            for m in later:
                producer.send(m)
            assert producer.last_sequence_id() == len(first) + len(later) - 1
            # Sequence id 0 cannot be given: the Python client treats 0 as "unset".
            for k in (1, 17, len(first) - 1, len(first) + 3):
                receipt = producer.send(b"resent-%d" % k, sequence_id=k)
                assert (receipt.ledger_id(), receipt.entry_id()) == (-1, -1)  # Pulsar's "dup"
            producer.close()
            append_sentinel(client, topic, b"sentinel")
            assert read_until(client, topic, b"sentinel") == [*first, *later, b"sentinel"]


def test_deduplication_drops_resends_after_sigkill(tmp_path: Path) -> None:
    """A client that lives through the crash resends what it has no receipt for; the
    restarted broker drops what it already stored: every message exactly once, in order."""
    topic = "persistent://public/default/dedup-resend"
    server = StandaloneProcess(tmp_path / "data", extra_args=["--deduplication", "true"])
    log = AckLog()
    sent: list[bytes] = []
    with running(server), pulsar_client(server) as client:
        producer = client.create_producer(
            topic, producer_name="resender", batching_enabled=False, send_timeout_millis=60_000
        )
        while len(log.acked()) < KILL_AFTER_ACKS:
            log.wait_for_room(len(sent))
            payload = b"msg-%05d" % len(sent)
            producer.send_async(payload, log.callback(payload))
            sent.append(payload)
        server.kill()
        in_flight = len(sent) - len(log.acked())
        assert in_flight > 0, "nothing was in flight when the server was killed"
        start(server)  # same port: the client reconnects and resends
        producer.flush()
        assert not log.failed()
        assert sorted(log.acked()) == sent, f"{in_flight} were in flight at the kill"
        append_sentinel(client, topic, b"sentinel")
        assert read_until(client, topic, b"sentinel") == [*sent, b"sentinel"]


# -- (c) subscriptions resume from their cursor ----------------------------------------------


def receive(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    return [consumer.receive(TIMEOUT_MS) for _ in range(n)]


def subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(
        topic,
        "durable",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
    )


# Each cycle ends in a kill right after the consumer's close; the window in which a
# confirmed-but-unpersisted ack could be lost is short, so several cycles are run.
CURSOR_CYCLES = ["individual", "cumulative", "individual", "individual"] * 2


def test_subscription_resumes_from_cursor_after_sigkill(tmp_path: Path) -> None:
    """Each cycle: subscribe, receive 20, acknowledge them (individually leaving one hole, or
    cumulatively), close the consumer and SIGKILL the server at once. The restarted server
    delivers exactly the unacknowledged messages, oldest first."""
    topic = "persistent://public/default/cursor-crash"
    server = StandaloneProcess(tmp_path / "data")
    sent = [b"m-%03d" % i for i in range(200)]
    acked: set[bytes] = set()
    with running(server):
        with pulsar_client(server) as client:
            producer = client.create_producer(topic, batching_enabled=False)
            for m in sent:
                producer.send(m)
        for cycle, ack_kind in enumerate(CURSOR_CYCLES):
            expected = [m for m in sent if m not in acked][:20]
            with pulsar_client(server, outlives_server=True) as client:
                consumer = subscribe(client, topic)
                got = receive(consumer, 20)
                assert [m.data() for m in got] == expected, (
                    f"cycle {cycle}: the subscription did not resume at its cursor"
                )
                if ack_kind == "individual":
                    for i, msg in enumerate(got):
                        if i != 3:  # a hole, redelivered first next time
                            consumer.acknowledge(msg)
                            acked.add(msg.data())
                else:
                    consumer.acknowledge_cumulative(got[-1])
                    acked |= set(sent[: sent.index(got[-1].data()) + 1])
                # Closing flushes the client's grouped acks and returns once the server
                # confirmed; the kill follows at once: what was confirmed must be durable.
                consumer.close()
                restart_after_sigkill(server)
        with pulsar_client(server) as client:
            append_sentinel(client, topic, b"sentinel")
            consumer = subscribe(client, topic)
            got_all: list[bytes] = []
            while not got_all or got_all[-1] != b"sentinel":
                got_all.append(consumer.receive(TIMEOUT_MS).data())
            assert got_all == [*(m for m in sent if m not in acked), b"sentinel"]
            consumer.close()
