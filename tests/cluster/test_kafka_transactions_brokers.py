"""Kafka transactions over several brokers: the transaction coordinator is one broker, the
partitions are served by both, the consumer group's coordinator may be either. Commit and
abort markers reach every partition, read_committed consumers see committed records only,
each once, and a transaction survives its coordinator being killed with -9."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
import requests
from confluent_kafka.admin import AdminClient, NewTopic

from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for

pytestmark = pytest.mark.slow
PARTITIONS = 6


def _leaders(bootstrap: str, topic: str) -> set[int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p.leader for p in meta.topics[topic].partitions.values()}


def _coordinator(brokers: list[StandaloneProcess], tid: str) -> StandaloneProcess:
    """The broker owning the bundle of ``tid``'s coordinator name (groups.coordinator_name)."""
    local = "__group-" + hashlib.sha1(tid.encode()).hexdigest()[:20]
    url = f"{brokers[0].http_url}/lookup/v2/topic/persistent/public/default/{local}"
    owner = requests.get(url, timeout=30).json()["brokerUrl"]
    return next(b for b in brokers if owner.endswith(f":{b.pulsar_port}"))


def _read_committed(bootstrap: str, topic: str, want: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    quiet_since = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                if len(got) >= want:  # all there: make sure nothing more (an aborted one) comes
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 3:
                        break
                continue
            quiet_since = None
            got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    """Three storage nodes and two brokers (sessions of 3 s: failover within seconds)."""
    url = zookeeper.url(f"/ktxn-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    try:
        for _ in range(3):
            cluster.add_node()
        cluster.add_broker()
        cluster.add_broker()
        yield cluster
    finally:
        cluster.stop()


def _create(cluster: Cluster, *topics: str) -> str:
    """Create ``topics`` with PARTITIONS partitions; the bootstrap list of both brokers."""
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in cluster.brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in topics:
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS)])[name].result(30)
    return bootstrap


def test_transactions_commit_and_abort_across_brokers_and_survive_the_coordinator(
    cluster: Cluster,
) -> None:
    first, second = cluster.brokers
    bootstrap = _create(cluster, "txn-out", "txn-in")
    assert len(_leaders(bootstrap, "txn-out")) == 2  # partitions on both brokers

    tid = "orders-writer"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid,
         "transaction.timeout.ms": 60_000}
    )  # fmt: skip
    producer.init_transactions(30)

    def send(prefix: str) -> None:
        for i in range(60):
            producer.produce("txn-out", f"{prefix}-{i}".encode(), partition=i % PARTITIONS)

    producer.begin_transaction()
    send("commit1")
    producer.commit_transaction(30)
    producer.begin_transaction()
    send("abort")
    producer.abort_transaction(30)

    # read-process-write: offsets of an input group committed with the transaction
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        plain.produce("txn-in", f"in-{i}".encode(), partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    group = "copier"
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe(["txn-in"])
    taken = []
    deadline = time.monotonic() + 60
    while len(taken) < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            taken.append(msg.value())
    assert len(taken) == 30
    producer.begin_transaction()
    for value in taken:
        producer.produce("txn-out", b"copy-" + value)
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    committed = consumer.committed(consumer.assignment(), timeout=30)
    assert sum(tp.offset for tp in committed) == 30  # every input offset, once
    consumer.close()

    # the coordinator dies (kill -9) with a transaction written but not committed
    producer.begin_transaction()
    send("commit2")
    assert producer.flush(30) == 0
    dead = _coordinator(cluster.brokers, tid)
    dead.kill()
    survivor = second if dead is first else first
    producer.commit_transaction(120)  # the client finds the new coordinator and retries

    want = {f"{p}-{i}".encode() for p in ("commit1", "commit2") for i in range(60)}
    want |= {b"copy-" + v for v in taken}
    got = _read_committed(f"127.0.0.1:{survivor.kafka_port}", "txn-out", len(want))
    assert sorted(got) == sorted(want)  # each committed record once, nothing aborted
    producer.flush(10)


def test_a_transaction_whose_producer_and_coordinator_both_die_is_aborted(
    cluster: Cluster,
) -> None:
    """Nobody comes back for it: the surviving broker adopts the open transaction and
    aborts it at its timeout, so read_committed consumers are not held back for ever."""
    first, second = cluster.brokers
    bootstrap = _create(cluster, "stuck")
    tid = "abandoned"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid,
         "transaction.timeout.ms": 5_000}
    )  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("stuck", f"open-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    dead = _coordinator(cluster.brokers, tid)
    survivor = second if dead is first else first
    dead.kill()
    del producer  # the producer is gone too: no EndTxn will ever come
    plain = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{survivor.kafka_port}"})
    for i in range(30):
        plain.produce("stuck", f"after-{i}".encode(), partition=i % PARTITIONS)
    assert plain.flush(60) == 0
    want = {f"after-{i}".encode() for i in range(30)}
    got = wait_for(
        lambda: set(_read_committed(f"127.0.0.1:{survivor.kafka_port}", "stuck", 30)) or None,
        120,
        "records after the abandoned transaction readable with read_committed",
    )
    assert got == want
