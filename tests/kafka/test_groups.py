"""Consumer groups: rebalancing on join, leave and session timeout; committed offsets."""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiokafka
import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import run_standalone

PARTITIONS = 6
MEMBER = Path(__file__).with_name("group_member.py")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """The module's server accepts the 3 s session timeout the members use (Kafka's
    default minimum is 6 s), so a killed member is noticed quickly; KIP-848 members get the
    same session and a 300 ms heartbeat from the server."""
    yield from run_standalone(
        tmp_path_factory,
        "--group-min-session-timeout-ms", "1000",
        "--group-consumer-session-timeout-ms", "3000",
        "--group-consumer-heartbeat-interval-ms", "300",
    )  # fmt: skip


@dataclass
class Member:
    """A group member process and what it reported."""

    name: str
    proc: subprocess.Popen[str]
    events: queue.Queue[tuple[str, str]]
    committed: set[tuple[int, int]] = field(default_factory=set)
    assignment: set[int] = field(default_factory=set)


def _start_member(
    name: str, bootstrap: str, topic: str, group: str, q: queue.Queue, protocol: str
) -> Member:
    proc = subprocess.Popen(
        [sys.executable, str(MEMBER), bootstrap, topic, group, protocol],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put((name, line.strip()))
        q.put((name, "exited"))

    threading.Thread(target=pump, daemon=True).start()
    return Member(name, proc, q)


class Group:
    def __init__(self, bootstrap: str, topic: str, protocol: str = "classic") -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, f"g-{topic}"
        self.protocol = protocol
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self.members: dict[str, Member] = {}

    def start(self, name: str) -> None:
        self.members[name] = _start_member(
            name, self.bootstrap, self.topic, self.group, self.events, self.protocol
        )

    def until(self, done: object, timeout: float = 60) -> None:
        """Process member reports until ``done()`` holds."""
        deadline = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            name, line = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            member = self.members[name]
            if line.startswith("assigned"):
                parts = line.removeprefix("assigned").strip()
                member.assignment = {int(p) for p in parts.split(",")} if parts else set()
            elif line.startswith("committed"):
                _, p, o = line.split()
                member.committed.add((int(p), int(o)))
            assert time.monotonic() < deadline, "timed out waiting for the group"

    def live(self) -> list[Member]:
        return [m for m in self.members.values() if m.proc.poll() is None]

    def spread_over(self, n: int) -> bool:
        live = self.live()
        owned = [m.assignment for m in live]
        return (
            len(live) == n
            and all(owned)
            and set().union(*owned) == set(range(PARTITIONS))
            and (sum(len(a) for a in owned) == PARTITIONS)
        )

    def committed(self) -> set[tuple[int, int]]:
        return set().union(*(m.committed for m in self.members.values()))

    def stop_all(self) -> None:
        for m in self.members.values():
            if m.proc.poll() is None:
                m.proc.kill()
            m.proc.wait()
            if m.proc.stdout is not None:
                m.proc.stdout.close()


def _produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
    futures[topic].result(30)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_of_three_rebalances_on_leave_and_on_kill(
    bootstrap: str, topic: str, protocol: str
) -> None:
    """Classic groups (client-side assignment) and KIP-848 groups (group.protocol=consumer:
    the server assigns, revoking before it reassigns) alike."""
    _create(bootstrap, topic)
    group = Group(bootstrap, topic, protocol)
    try:
        for name in ("a", "b", "c"):
            group.start(name)
        group.until(lambda: group.spread_over(3))
        _produce(bootstrap, topic, 10)
        group.until(lambda: len(group.committed()) == 60)

        a = group.members["a"]
        a.proc.terminate()  # clean close: LeaveGroup, the other two take over at once
        assert a.proc.wait(30) == 0
        group.until(lambda: group.spread_over(2))
        _produce(bootstrap, topic, 10)
        group.until(lambda: len(group.committed()) == 120)

        group.members["b"].proc.kill()  # no goodbye: the session timeout (3 s) finds out
        group.members["b"].proc.wait()
        group.until(lambda: group.spread_over(1))
        _produce(bootstrap, topic, 10)
        group.until(lambda: len(group.committed()) == 180)
    finally:
        group.stop_all()

    every = {(p, o) for p in range(PARTITIONS) for o in range(30)}
    assert group.committed() == every  # nothing committed was lost ...
    reports = sum(len(m.committed) for m in group.members.values())
    assert reports == len(every)  # ... and no committed record was handed out twice
    committed = _committed_offsets(bootstrap, group.group, topic)
    assert committed == {p: 30 for p in range(PARTITIONS)}


def _committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
    finally:
        consumer.close()


def test_kafka_python_group_resumes_from_committed_offset(bootstrap: str, topic: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(20):
        producer.send(topic, f"m{i}".encode())
    producer.flush()
    producer.close()

    def consume(n: int) -> list[bytes]:
        consumer = kafka.KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20_000,
        )
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == n:
                break
        consumer.commit()
        consumer.close()
        return got

    assert consume(8) == [f"m{i}".encode() for i in range(8)]
    assert consume(12) == [f"m{i}".encode() for i in range(8, 20)]


async def test_aiokafka_group_shares_partitions_and_commits(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=4)])[topic].result(30)
    consumers = [
        aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        for _ in range(2)
    ]
    for c in consumers:
        await c.start()
    seen: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    try:
        async with asyncio.timeout(60):
            while not all(len(c.assignment()) == 2 for c in consumers):
                for c in consumers:
                    await c.getmany(timeout_ms=100)
            await _produce_async(bootstrap, topic, 40)
            while sum(len(v) for v in seen.values()) < 40:
                for i, c in enumerate(consumers):
                    batch = await c.getmany(timeout_ms=100)
                    for tp, records in batch.items():
                        seen[i] += [(tp.partition, r.value) for r in records]
                    await c.commit()
    finally:
        for c in consumers:
            await c.stop()
    values = sorted(v for vs in seen.values() for _, v in vs)
    assert values == sorted(f"m{i}".encode() for i in range(40))
    owned = [{p for p, _ in seen[i]} for i in range(2)]
    assert owned[0] and owned[1] and not owned[0] & owned[1]


async def _produce_async(bootstrap: str, topic: str, n: int) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(n):
            await producer.send_and_wait(topic, f"m{i}".encode(), partition=i % 4)
    finally:
        await producer.stop()
