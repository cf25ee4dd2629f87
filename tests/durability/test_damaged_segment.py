"""A damaged closed segment in the middle of a topic no longer silences it (issue 21,
item 6): a reader gets every message up to the damaged entry (before: 0 of 3,000); a Kafka
consumer then gets CORRUPT_MESSAGE; internal-stats, /metrics and ``magnetar admin topics
check`` name the damaged segment, its file and byte."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pulsar
import pytest

from magnetar.testing.server import StandaloneProcess

pytestmark = pytest.mark.slow

ARGS = ["--segment-max-entries", "100"]


def segment_files(data: Path) -> list[Path]:
    """The files holding the topic's segments, in segment order: each ledger's files in the
    engine beneath, never an empty one."""
    files = sorted((data / "ledgers").rglob("*.log"))
    return [f for f in files if f.stat().st_size > 0]


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
    logs = segment_files(data)
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


def _damaged_topic(data: Path, topic: str) -> Path:
    """350 messages in segments of 100, then (server stopped) a byte of entry 50 of the
    second segment flipped. Returns the damaged file."""
    with StandaloneProcess(data, extra_args=ARGS) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(350):
            producer.send(f"{i:04d}".encode() * 25)
        client.close()
    second = segment_files(data)[1]
    entry = second.stat().st_size // 100
    with second.open("r+b") as f:
        f.seek(50 * entry + entry - 10)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    return second


def test_damage_reaches_kafka_consumers_stats_metrics_and_the_check_command(
    tmp_path: Path,
) -> None:
    name = f"damaged-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    data = tmp_path / "data"
    damaged = _damaged_topic(data, topic)
    with StandaloneProcess(data, extra_args=ARGS) as server:
        admin = [sys.executable, "-m", "magnetar.cli", "admin", "--url", server.http_url]
        # Before any read nothing is known; the check command reads everything and finds it.
        check = subprocess.run(
            [*admin, "topics", "check", topic], capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 1, check.stdout + check.stderr
        assert "1 damaged segment" in check.stderr and str(damaged) in check.stderr
        assert "at byte" in check.stderr
        stats = _get(f"{server.http_url}/admin/v2/persistent/public/default/{name}/internalStats")
        [ledger] = [x for x in stats["ledgers"] if x["damaged"]]
        assert stats["damagedLedgers"] == [ledger["ledgerId"]]
        assert str(damaged) in ledger["damaged"]
        metrics = urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30).read()
        assert b"magnetar_storage_damaged_segments{" in metrics
        assert b'magnetar_storage_damaged_segments{cluster="standalone"} 1.0' in metrics

        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "g"}
        )
        consumer.assign([confluent_kafka.TopicPartition(name, 0, 0)])
        got: list[int] = []
        error = None
        while error is None:
            msg = consumer.poll(30)
            assert msg is not None, f"nothing after {len(got)} messages: the damage was silent"
            if msg.error():
                error = msg.error()
            else:
                got.append(int(msg.value()[:4]))
        consumer.close()
    assert got == list(range(150))
    assert error.code() == confluent_kafka.KafkaError.INVALID_MSG, error  # CORRUPT_MESSAGE, 2


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body
