"""A damaged entry on one storage node (issue 21, item 6, cluster mode): readers get every
message from the other replicas, the broker counts the damaged read and repairs the copy,
``magnetar admin topics check`` names the node and the entries, and ``check --repair``
writes the good copy back, after which the check is clean."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
import pulsar
import pytest

from magnetar.meta import open_metadata_store
from magnetar.storage import catalog
from magnetar.testing.cluster import StorageNodeProcess
from tests.cluster.conftest import Cluster, wait_for

pytestmark = pytest.mark.slow

QUORUM = ["--ensemble-size", "3", "--write-quorum", "3", "--ack-quorum", "2"]
ROLL = ["--segment-max-entries", "100"]  # the broker's ledgers: 3 of 100 entries
NODE_ROLL = ["--segment-max-entries", "40"]  # a node's entry files: closed every 40 entries
COUNT = 300


def _ledger_files(node: StorageNodeProcess, ledger_id: int) -> list[Path]:
    """The entry files of the node's copy of ``ledger_id``, oldest first."""

    async def partition_id() -> int:
        store = open_metadata_store(f"sqlite:///{node.data_dir / 'catalog.db'}")
        try:
            found = await store.get(catalog.partition_path(f"L{ledger_id}"))
            assert found is not None, f"{node.node_id} holds nothing of ledger {ledger_id}"
            return int(json.loads(found.value)["id"])
        finally:
            await store.aclose()

    directory = node.data_dir / "ledgers" / f"{asyncio.run(partition_id()):010d}"
    return sorted(directory.glob("*.log"), key=lambda p: int(p.stem))


def _flip(path: Path, entries: int, index: int) -> None:
    """Flip a payload byte of entry ``index`` of a closed file of ``entries`` equal entries."""
    assert path.with_suffix(".index").exists(), f"{path} is not closed"
    size = path.stat().st_size // entries
    with path.open("r+b") as f:
        f.seek(index * size + size - 10)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


def _admin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "magnetar.cli", "admin", "--url", url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _read_pulsar(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while len(got) < COUNT:
            got.append(reader.read_next(30_000).data())
        assert not reader.has_message_available()
        return got
    finally:
        client.close()


def _read_kafka(port: int, name: str) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(name, 0, 0)])
        got = []
        while len(got) < COUNT:
            msg = consumer.poll(30)
            assert msg is not None, f"nothing after {len(got)} messages"
            assert not msg.error(), msg.error()
            got.append(msg.value())
        return got
    finally:
        consumer.close()


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    found = re.search(rf"^{name}(?:_total)?{{[^}}]*}} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def _stats(url: str, name: str) -> dict[str, Any]:
    path = f"{url}/admin/v2/persistent/public/default/{name}/internalStats"
    with urllib.request.urlopen(path, timeout=30) as r:
        body: dict[str, Any] = json.loads(r.read())
    return body


def test_a_damaged_replica_is_read_around_reported_and_repaired(cluster: Cluster) -> None:
    nodes = [cluster.add_node(*NODE_ROLL) for _ in range(3)]
    by_id = {n.node_id: n for n in nodes}
    first = cluster.add_broker(*QUORUM, *ROLL)
    name = f"damaged-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    client = pulsar.Client(first.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{i:04d}".encode() * 25 for i in range(COUNT)]
    for value in sent:
        producer.send(value)
    client.close()
    first.stop()  # its ledgers closed; a new broker reads from the nodes, not its tail cache

    one, two = cluster.ledgers(topic)[:2]
    assert one["info"]["state"] == two["info"]["state"] == "CLOSED"
    one_id, two_id = one["info"]["segment_id"], two["info"]["segment_id"]
    # Reads of the first ledger start at entry 0 on the first node of its ensemble: damage
    # that node's copy of entry 2
    a = by_id[one["ensembles"][0][1][0]]
    _damage(cluster, a, one_id, 2)

    broker = cluster.add_broker(*QUORUM, *ROLL)
    # Every message, in order, to a Pulsar reader and a Kafka consumer: the reader met the
    # damaged copy, counted it, read the entry from another replica and had the copy repaired
    assert _read_pulsar(broker.pulsar_url, topic) == sent
    assert _read_kafka(broker.kafka_port, name) == sent
    assert _metric(broker.http_url, "magnetar_damaged_replica_reads") >= 1
    wait_for(lambda: _metric(broker.http_url, "magnetar_repaired_replicas") >= 1, 60, "repair")
    _assert_clean(broker.http_url, topic, set(by_id))

    # Another node's copy of entry 30 of the second ledger, damaged while the broker runs:
    # the check reads every copy and names the node and the entry
    b = by_id[next(n for n in two["ensembles"][0][1] if n != a.node_id)]
    _damage(cluster, b, two_id, 30)
    check = _admin(broker.http_url, "topics", "check", topic)
    assert check.returncode == 1, check.stdout + check.stderr
    assert f"storage node {b.node_id}: ledger {two_id}: entries 30" in check.stderr
    assert "corrupt data" in check.stderr and "at byte" in check.stderr
    assert two_id in _stats(broker.http_url, name)["damagedLedgers"]

    repaired = _admin(broker.http_url, "topics", "check", "--repair", topic)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    _assert_clean(broker.http_url, topic, set(by_id))
    assert _metric(broker.http_url, "magnetar_repaired_replicas") >= 2
    assert _stats(broker.http_url, name)["damagedLedgers"] == []
    assert _read_pulsar(broker.pulsar_url, topic) == sent


def test_a_node_whose_open_file_is_damaged_starts_and_its_copy_is_repaired(
    cluster: Cluster,
) -> None:
    """With the default entry-file size the node's copy of a ledger is one open file, which
    recovery checks at start: the node sets that ledger aside instead of failing to start."""
    nodes = [cluster.add_node() for _ in range(3)]
    by_id = {n.node_id: n for n in nodes}
    first = cluster.add_broker(*QUORUM, *ROLL)
    name = f"damaged-open-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    client = pulsar.Client(first.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{i:04d}".encode() * 25 for i in range(COUNT)]
    for value in sent:
        producer.send(value)
    client.close()
    first.stop()
    one = cluster.ledgers(topic)[0]
    a = by_id[one["ensembles"][0][1][0]]
    a.stop()
    [log] = _ledger_files(a, one["info"]["segment_id"])
    size = log.stat().st_size // 100  # its 100 entries, equal in size
    with log.open("r+b") as f:  # flip a payload byte of entry 2
        f.seek(2 * size + size - 10)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    restarted = cluster.restart_node(a)
    assert any("set aside" in line for line in restarted.output), restarted.output[-5:]

    broker = cluster.add_broker(*QUORUM, *ROLL)
    assert _read_pulsar(broker.pulsar_url, topic) == sent
    assert _read_kafka(broker.kafka_port, name) == sent
    assert _metric(broker.http_url, "magnetar_damaged_replica_reads") >= 1
    wait_for(lambda: _metric(broker.http_url, "magnetar_repaired_replicas") >= 1, 60, "repair")
    _assert_clean(broker.http_url, topic, set(by_id))


def _damage(cluster: Cluster, node: StorageNodeProcess, ledger_id: int, index: int) -> None:
    """Stop ``node``, flip a byte of entry ``index`` of its copy of the ledger, restart it."""
    node.stop()
    _flip(_ledger_files(node, ledger_id)[0], 40, index)
    cluster.restart_node(node)


def _assert_clean(url: str, topic: str, nodes: set[str]) -> None:
    clean = _admin(url, "topics", "check", topic)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    report = json.loads(clean.stdout)
    for row in report["ledgers"]:
        assert {r["node"] for r in row["replicas"]} == nodes
        for replica in row["replicas"]:  # Qw = E: every node holds every entry, intact
            assert replica["entries"] == row["entries"] and not replica["damaged"], replica


def test_an_entry_damaged_on_every_replica_is_skipped_when_told(cluster: Cluster) -> None:
    """No good copy left: a Kafka consumer gets CORRUPT_MESSAGE there; a Pulsar subscription
    with --auto-skip-non-recoverable-data skips what no replica can serve, and no copy is
    dropped by a repair that has nothing to copy from."""
    nodes = [cluster.add_node(*NODE_ROLL) for _ in range(3)]
    first = cluster.add_broker(*QUORUM, *ROLL)
    name = f"damaged-all-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    client = pulsar.Client(first.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"{i:04d}".encode() * 25 for i in range(COUNT)]
    for value in sent:
        producer.send(value)
    client.close()
    first.stop()
    one_id = cluster.ledgers(topic)[0]["info"]["segment_id"]
    for node in nodes:  # entry 20 of ledger 1 on every node; each loses 20..39 at start
        _damage(cluster, node, one_id, 20)

    broker = cluster.add_broker(*QUORUM, *ROLL, "--auto-skip-non-recoverable-data", "true")
    consumer_client = pulsar.Client(
        broker.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = consumer_client.subscribe(
            topic, "s", initial_position=pulsar.InitialPosition.Earliest
        )
        got = []
        while not got or got[-1] != sent[-1]:
            msg = consumer.receive(30_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == sent[:20] + sent[40:]
        path = f"{broker.http_url}/admin/v2/persistent/public/default/{name}/stats"
        with urllib.request.urlopen(path, timeout=30) as r:
            assert json.loads(r.read())["subscriptions"]["s"]["msgSkippedAsDamaged"] == 20
    finally:
        consumer_client.close()

    kafka = confluent_kafka.Consumer(
        {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "group.id": "g"}
    )
    try:
        kafka.assign([confluent_kafka.TopicPartition(name, 0, 0)])
        values, error = [], None
        while error is None:
            msg = kafka.poll(30)
            assert msg is not None, f"nothing after {len(values)} records: the damage was silent"
            if msg.error():
                error = msg.error()
            else:
                values.append(msg.value())
        assert values == sent[:20]
        assert error.code() == confluent_kafka.KafkaError.INVALID_MSG, error  # CORRUPT_MESSAGE
    finally:
        kafka.close()
    check = _admin(broker.http_url, "topics", "check", "--repair", topic)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "entries 20, 21" in check.stderr
    assert any("no intact copy on another storage node" in line for line in broker.output)
