"""Key_Shared dispatch with the official client (issue 12): two consumers with small
receiver queues get every message, each key in order on one consumer; a consumer that stops
receiving holds back only its own keys; consumers joining and leaving mid-stream lose
nothing and never overtake one another within a key.

Before the fix the dispatcher stopped at the first entry whose consumer had no permits: a
consumer whose application was not receiving stalled every other consumer (Pulsar parks
that consumer's entries and goes on).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

import pulsar
import pytest

from tests.broker.conftest import RECEIVE_MS, drain, payloads

KEY_SHARED = pulsar.ConsumerType.KeyShared
N, KEYS = 400, 20


def _key(i: int) -> str:
    return f"k{i % KEYS:02d}"


def _send(producer: pulsar.Producer, sent: list[bytes]) -> None:
    for i, m in enumerate(sent):
        producer.send_async(m, None, partition_key=_key(i))
    producer.flush()


class Receivers:
    """One thread per consumer: receive, record (in one log, in the order received across
    consumers), acknowledge at once. ``wait`` returns once ``n`` were recorded or a
    receive has waited RECEIVE_MS for a message that should come."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, bytes]] = []  # consumer, key, payload
        self._lock = threading.Condition()
        self._threads: dict[pulsar.Consumer, tuple[threading.Thread, threading.Event]] = {}

    def start(self, consumer: pulsar.Consumer, name: str) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(consumer, name, stop), daemon=True)
        self._threads[consumer] = (thread, stop)
        thread.start()

    def stop(self, consumer: pulsar.Consumer) -> None:
        thread, stop = self._threads.pop(consumer)
        stop.set()
        thread.join()

    def _run(self, consumer: pulsar.Consumer, name: str, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                msg = consumer.receive(100)
            except pulsar.Timeout:
                continue
            with self._lock:
                self.log.append((name, msg.partition_key(), msg.data()))
                self._lock.notify_all()
            consumer.acknowledge(msg)

    def wait(self, n: int) -> int:
        with self._lock:
            while len(self.log) < n:
                before = len(self.log)
                self._lock.wait(RECEIVE_MS / 1000)
                if len(self.log) == before:
                    break  # nothing came for RECEIVE_MS: stalled
            return len(self.log)

    def close(self) -> None:
        for consumer in list(self._threads):
            self.stop(consumer)


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    r = Receivers()
    try:
        yield r
    finally:
        r.close()


def _check(log: list[tuple[str, str, bytes]], sent: list[bytes]) -> None:
    """Everything exactly once, and each key's messages in the order they were sent."""
    assert sorted(p for _, _, p in log) == sorted(sent)
    per_key: dict[str, list[bytes]] = defaultdict(list)
    for _, key, payload in log:
        per_key[key].append(payload)
    for key, got in per_key.items():
        assert got == [m for i, m in enumerate(sent) if _key(i) == key], key


@pytest.mark.slow
def test_two_consumers_with_small_queues_get_everything_round_after_round(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for round_ in range(20):
        with_receivers = Receivers()
        consumers = [
            client.subscribe(
                topic, f"round-{round_}", consumer_type=KEY_SHARED, receiver_queue_size=10
            )
            for _ in range(2)
        ]
        try:
            for i, c in enumerate(consumers):
                with_receivers.start(c, f"c{i}")
            sent = payloads(N, prefix=f"r{round_}")
            _send(producer, sent)
            got = with_receivers.wait(N)
        finally:
            with_receivers.close()
            for c in consumers:
                c.close()
        assert got == N, f"round {round_}: {got} of {N} arrived"
        _check(with_receivers.log, sent)
        owners = defaultdict(set)
        for name, key, _ in with_receivers.log:
            owners[key].add(name)
        assert all(len(o) == 1 for o in owners.values()), f"round {round_}: {dict(owners)}"


def test_a_consumer_that_stops_receiving_holds_back_only_its_own_keys(
    client: pulsar.Client, topic: str
) -> None:
    def join(name: str) -> pulsar.Consumer:
        return client.subscribe(
            topic, "slow", consumer_type=KEY_SHARED, receiver_queue_size=10, consumer_name=name
        )

    fast, idle = join("fast"), join("idle")
    sent = payloads(N)
    _send(client.create_producer(topic, batching_enabled=False), sent)
    first = drain(fast)  # meanwhile "idle" receives nothing: its queue fills after 10
    rest = drain(idle) + drain(fast)
    assert first and rest
    fast_keys = {_key(sent.index(m)) for m in first}
    # "fast" got every message of its keys while "idle" held its own: none came later.
    assert all(_key(sent.index(m)) not in fast_keys for m in rest)
    assert sorted(first + rest) == sent


@pytest.mark.slow
def test_consumers_joining_and_leaving_mid_stream_keep_key_order(
    client: pulsar.Client, topic: str, receivers: Receivers
) -> None:
    def join(name: str) -> pulsar.Consumer:
        consumer = client.subscribe(
            topic, "churn", consumer_type=KEY_SHARED, receiver_queue_size=10, consumer_name=name
        )
        receivers.start(consumer, name)
        return consumer

    producer = client.create_producer(topic, batching_enabled=False)
    sent = payloads(N)
    first = join("first")
    _send(producer, sent[:100])
    second = join("second")  # takes keys over from "first" while it holds some unacked
    _send(producer, sent[100:200])
    receivers.stop(first)
    first.close()  # what it held unacknowledged goes to the others
    third = join("third")
    _send(producer, sent[200:])
    got = receivers.wait(N)
    receivers.close()
    second.close()
    third.close()
    assert got == N
    _check(receivers.log, sent)


def test_a_joining_consumer_waits_for_keys_the_old_owner_still_holds(
    client: pulsar.Client, topic: str
) -> None:
    """ "first" holds ten messages unacknowledged when "second" joins and takes some of their
    keys over: "second" gets none of those keys until "first" has acknowledged them."""

    def join(name: str) -> pulsar.Consumer:
        return client.subscribe(
            topic, "join", consumer_type=KEY_SHARED, receiver_queue_size=10, consumer_name=name
        )

    first = join("first")
    sent = [f"m-{i:04d}".encode() for i in range(100)]
    _send(client.create_producer(topic, batching_enabled=False), sent)
    held = [first.receive(RECEIVE_MS) for _ in range(10)]  # received, not acknowledged yet
    second = join("second")
    log: list[tuple[str, str, bytes]] = []
    log += [("second", _key(sent.index(m)), m) for m in drain(second)]
    for msg in held:
        log.append(("first", msg.partition_key(), msg.data()))
        first.acknowledge(msg)
    while len(log) < len(sent):
        more = [("first", _key(sent.index(m)), m) for m in drain(first)]
        more += [("second", _key(sent.index(m)), m) for m in drain(second)]
        if not more:
            break
        log += more
    moved = {k for name, k, _ in log if name == "second"} & {m.partition_key() for m in held}
    assert moved, "no key moved to the joining consumer: the test proves nothing"
    _check(log, sent)
