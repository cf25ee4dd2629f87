"""A data directory written in the storage engine's layout (releases before issue 13),
opened by today's standalone: upgraded at start, every acknowledged message there once with
the same message id, cursors and appends going on from where they were.

A real standalone writing the old layout (``tests.durability.engine_layout_child``) is
killed -9, then today's standalone starts on the same directory.
"""

from __future__ import annotations

from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

TOPIC = "persistent://public/default/upgraded"
SMALL = ["--segment-max-entries", "7"]


def _receive_all(client: pulsar.Client, sub: str, n: int) -> list[tuple[bytes, str]]:
    consumer = client.subscribe(TOPIC, sub, initial_position=pulsar.InitialPosition.Earliest)
    got = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=20_000)
        got.append((msg.data(), str(msg.message_id())))
        consumer.acknowledge(msg)
    consumer.close()
    return got


def test_an_engine_directory_is_upgraded_at_start_and_keeps_every_message_id(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    old = StandaloneProcess(data, SMALL, module="tests.durability.engine_layout_child").start()
    try:
        client = pulsar.Client(old.pulsar_url)
        single = client.create_producer(TOPIC, batching_enabled=False)
        sent = [single.send(b"s%d" % i) for i in range(30)]
        batched = client.create_producer(
            TOPIC, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=50
        )
        for i in range(20):
            batched.send_async(b"b%d" % i, None)
        batched.flush()
        before = _receive_all(client, "reader", 50)
        # a subscription half way: its cursor must survive the upgrade too
        half = client.subscribe(TOPIC, "half", initial_position=pulsar.InitialPosition.Earliest)
        for _ in range(25):
            half.acknowledge(half.receive(timeout_millis=20_000))
        half.close()
        client.close()
    finally:
        old.kill()  # no clean close: the engine's open segment is recovered, then upgraded
    assert [d for d, _ in before[:30]] == [b"s%d" % i for i in range(30)]
    assert [m for _, m in before[:30]] == [str(m) for m in sent]

    new = StandaloneProcess(data, SMALL).start()
    try:
        assert any("upgrad" in line for line in new.output), "the upgrade said nothing"
        client = pulsar.Client(new.pulsar_url)
        assert _receive_all(client, "after", 50) == before
        half = client.subscribe(TOPIC, "half")
        rest = [half.receive(timeout_millis=20_000).data() for _ in range(25)]
        assert rest == [d for d, _ in before[25:]]
        producer = client.create_producer(TOPIC, batching_enabled=False)
        later = producer.send(b"later")
        last_old = max(int(m.strip("()").split(",")[0]) for _, m in before)
        assert later.ledger_id() > last_old  # a new segment, above every upgraded id
        everything = _receive_all(client, "everything", 51)
        assert everything[:50] == before and everything[50][0] == b"later"
        client.close()
    finally:
        new.stop()
