"""Kafka-written data goes to the object store like any other and reads back unchanged:
through a Kafka consumer, a Pulsar consumer, and as Parquet rows."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pulsar
import pyarrow.parquet as pq
import pytest

from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import offloading_server

N = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    yield from offloading_server(tmp_path_factory, "kafka-offload")


def _http(server: StandaloneProcess, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.http_url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {path}: HTTP {e.code} {e.read()!r}") from None
    return json.loads(raw) if raw else None


def _wait(probe: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_kafka_batches_offload_and_read_back(server: StandaloneProcess) -> None:
    topic = "kafka-offloaded"
    sent = [(f"k{i}".encode(), f"value-{i}".encode() * 3, 1_700_000_000_000 + i) for i in range(N)]
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
            "linger.ms": 2,
            "batch.num.messages": 5,
            "compression.type": "lz4",
        }
    )
    for i, (key, value, ts) in enumerate(sent):
        producer.produce(topic, key=key, value=value, timestamp=ts, headers=[("h", b"x")])
        if i % 5 == 4:  # one record batch (= one entry) per five records
            assert producer.flush(30) == 0

    base = f"/admin/v2/persistent/public/default/{topic}"
    _http(server, "POST", "/admin/v2/namespaces/public/default/offloadDeletionLagMs", 0)
    _http(server, "PUT", base + "/offload")
    _wait(lambda: _http(server, "GET", base + "/offload")["status"] == "SUCCESS", "offload")

    def offloaded_remotely() -> bool:
        stats = _http(server, "GET", base + "/internal-stats")
        closed = [s for s in stats["ledgers"] if s["state"] != "OPEN"]
        return bool(closed) and all(s["offloaded"] and not s["local"] for s in closed)

    _wait(offloaded_remotely, "local copies to go after the lag")

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
            "group.id": "reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < N and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value(), msg.timestamp()[1], msg.headers()))
    finally:
        consumer.close()
    assert [(k, v, ts) for k, v, ts, _ in got] == sent
    assert all(h == [("h", b"x")] for *_, h in got)

    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        sub = client.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
        values = [sub.receive(10_000).data() for _ in range(N)]
    finally:
        client.close()
    assert values == [v for _, v, _ in sent]

    objects = sorted(Path(server.data_dir, "tier").rglob("*.parquet"))
    assert objects
    rows = pq.read_table(objects[0]).to_pylist()  # the topic table's data file (Iceberg names)
    assert rows[0]["__key"] == "k0" and rows[0]["value"] == sent[0][1]
    assert rows[0]["__properties"] == [("h", "x")]
