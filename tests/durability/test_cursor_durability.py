"""Acknowledged messages never come back (issue 12, "cursor durability you can rely on").

Each case acknowledges part of a topic with the real pulsar-client — individually or
cumulatively, on a Shared or an Exclusive subscription, also after
``redeliver_unacknowledged_messages`` and with batch-index acks inside batches — then stops
the server one of two ways and checks that a new consumer gets exactly the messages that were
not acknowledged:

- ``sigterm``: the consumer stays connected; once the broker has applied the acks (its stats
  show the backlog), the server is stopped cleanly and restarted;
- ``close-kill``: the consumer closes (the client flushes its grouped acks and the broker
  persists the cursor before confirming the close), then the server is killed with SIGKILL.

Pulsar promises at-least-once for both; Magnetar promises exactly what was acknowledged.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

N = 300
TIMEOUT_MS = 10_000
SHARED = pulsar.ConsumerType.Shared
EXCLUSIVE = pulsar.ConsumerType.Exclusive


def _client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _backlog(server: StandaloneProcess, topic: str, sub: str) -> int:
    path = urllib.parse.quote(topic.removeprefix("persistent://"))
    with urllib.request.urlopen(
        f"{server.http_url}/admin/v2/persistent/{path}/stats", timeout=10
    ) as resp:
        stats = json.loads(resp.read())
    return int(stats["subscriptions"][sub]["msgBacklog"])


def _wait_backlog(server: StandaloneProcess, topic: str, sub: str, expected: int) -> None:
    """Poll the broker's stats until it has applied the client's (grouped) acks."""
    deadline = time.monotonic() + 30
    while (got := _backlog(server, topic, sub)) != expected:
        assert time.monotonic() < deadline, f"backlog stayed {got}, expected {expected}"
        time.sleep(0.05)


def _produce(client: pulsar.Client, topic: str, *, batched: bool) -> None:
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=10, block_if_queue_full=True
    )
    for i in range(N):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    producer.close()


def _ack_individual(consumer: pulsar.Consumer, msgs: list[pulsar.Message]) -> set[int]:
    chosen = [m for m in msgs if int(m.data()) % 3 != 1]  # leave holes
    for m in chosen:
        consumer.acknowledge(m)
    return {int(m.data()) for m in chosen}


def _ack_cumulative(consumer: pulsar.Consumer, msgs: list[pulsar.Message]) -> set[int]:
    consumer.acknowledge_cumulative(msgs[-1])
    return {int(m.data()) for m in msgs}


def _ack_after_redeliver(consumer: pulsar.Consumer, msgs: list[pulsar.Message]) -> set[int]:
    """Ack a third, ask for redelivery of the rest, then ack what comes back of it."""
    first = {int(m.data()) for m in msgs if int(m.data()) % 3 == 0}
    for m in msgs:
        if int(m.data()) in first:
            consumer.acknowledge(m)
    consumer.redeliver_unacknowledged_messages()
    acked = set(first)
    want = {int(m.data()) for m in msgs} - first
    while want - acked:
        m = consumer.receive(TIMEOUT_MS)
        value = int(m.data())
        if value in want and value % 3 == 2:  # ack part of the redelivered ones
            consumer.acknowledge(m)
            acked.add(value)
        elif value in want:
            want.discard(value)
    return acked


ACKS: dict[str, Callable[[pulsar.Consumer, list[pulsar.Message]], set[int]]] = {
    "individual": _ack_individual,
    "cumulative": _ack_cumulative,
    "redelivered": _ack_after_redeliver,
}

CASES = [
    pytest.param(
        kind, ack, stop, batched, id=f"{kind_id}-{ack}-{stop}-{'batch' if batched else 'single'}"
    )
    for kind_id, kind in (("shared", SHARED), ("exclusive", EXCLUSIVE))
    for ack in ACKS
    for stop in ("sigterm", "close-kill")
    for batched in (False, True)
    if not (kind is SHARED and ack == "cumulative")  # Pulsar refuses cumulative on Shared
]


@pytest.mark.parametrize(("kind", "ack", "stop", "batched"), CASES)
def test_acknowledged_messages_never_come_back(
    tmp_path: Path, kind: pulsar.ConsumerType, ack: str, stop: str, batched: bool
) -> None:
    topic = f"persistent://public/default/cursor-{uuid.uuid4().hex[:8]}"
    sub = "durable"
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        client = _client(server)
        consumer = client.subscribe(
            topic, sub, consumer_type=kind, batch_index_ack_enabled=True, receiver_queue_size=50
        )
        _produce(client, topic, batched=batched)
        msgs = [consumer.receive(TIMEOUT_MS) for _ in range(N // 2)]
        if kind is EXCLUSIVE:  # delivery is in order: acking the first half is a prefix
            assert [int(m.data()) for m in msgs] == list(range(N // 2))
        acked = ACKS[ack](consumer, msgs)
        if stop == "sigterm":
            _wait_backlog(server, topic, sub, N - len(acked))
            server.stop()
            client.close()
        else:
            consumer.close()
            client.close()
            server.kill()
        server = StandaloneProcess(server.data_dir).start()
        client = _client(server)
        try:
            again = client.subscribe(topic, sub, consumer_type=kind, batch_index_ack_enabled=True)
            seen: list[int] = []
            while len(seen) < N - len(acked):
                seen.append(int(again.receive(TIMEOUT_MS).data()))
            with pytest.raises(pulsar.Timeout):
                again.receive(1000)  # nothing more: no acknowledged message came back
        finally:
            client.close()
        assert sorted(seen) == sorted(set(range(N)) - acked)
    finally:
        server.stop()


def _sub_type(server: StandaloneProcess, topic: str, sub: str) -> str:
    path = urllib.parse.quote(topic.removeprefix("persistent://"))
    with urllib.request.urlopen(
        f"{server.http_url}/admin/v2/persistent/{path}/stats", timeout=10
    ) as resp:
        return str(json.loads(resp.read())["subscriptions"][sub]["type"])


def test_subscriptions_come_back_as_the_type_they_were(tmp_path: Path) -> None:
    """After a restart a Shared or Key_Shared subscription is not an Exclusive one."""
    topic = f"persistent://public/default/types-{uuid.uuid4().hex[:8]}"
    kinds = {
        "shared": (pulsar.ConsumerType.Shared, "Shared"),
        "key-shared": (pulsar.ConsumerType.KeyShared, "Key_Shared"),
        "failover": (pulsar.ConsumerType.Failover, "Failover"),
        "exclusive": (pulsar.ConsumerType.Exclusive, "Exclusive"),
    }
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        client = _client(server)
        for sub, (kind, _) in kinds.items():
            client.subscribe(topic, sub, consumer_type=kind).close()
        client.close()
        server.stop()
        server = StandaloneProcess(server.data_dir).start()
        assert {sub: _sub_type(server, topic, sub) for sub in kinds} == {
            sub: name for sub, (_, name) in kinds.items()
        }
    finally:
        server.stop()
