"""A damaged closed segment in the middle of a topic no longer silences it (issue 21,
item 6): a reader gets every message up to the damaged entry. (Before: 0 of 3,000.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

ARGS = ["--segment-max-entries", "100"]


def test_a_reader_gets_everything_before_the_damage(tmp_path: Path) -> None:
    topic = f"persistent://public/default/damaged-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    with StandaloneProcess(data, extra_args=ARGS) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(350):
            producer.send(f"{i:04d}".encode() * 25)
        client.close()
    logs = sorted((data / "ledgers").rglob("*.log"))
    assert len(logs) == 4  # three closed segments of 100 entries and the open one
    second = logs[1]
    entry = second.stat().st_size // 100
    with second.open("r+b") as f:  # flip a payload byte of entry 50 of the second segment
        f.seek(50 * entry + entry - 10)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with StandaloneProcess(data, extra_args=ARGS) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while True:
            try:
                got.append(int(reader.read_next(3000).data()[:4]))
            except pulsar.Timeout:
                break
        client.close()
        assert any("corrupt data" in line for line in server.output)
    assert got == list(range(150))
