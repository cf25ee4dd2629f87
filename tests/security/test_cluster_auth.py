"""Two brokers with authentication and authorization on, sharing ZooKeeper and storage
nodes: every call one broker makes to the other goes over https (mTLS) and carries the
node's client credential (``--broker-client-auth-token``, a super-user), so load shedding
moves bundles, a Spark plan asked of one broker covers the partitions the other owns (their
Flight read grants signed by their owner, for the role that asked), a Kafka offset commit
reaches the broker serving the partition, a transaction's markers reach the brokers of its
partitions, and a namespace unload reaches every broker. A
role without permission is refused on both brokers; only a super-user may act for another
role."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pulsar
import pytest
import requests
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from magnetar.broker.ownership import bundle_of, equal_boundaries, range_name
from magnetar.core.names import TopicName
from magnetar.core.tokens import create_token, secret_key
from magnetar.testing.certs import TestCA
from magnetar.testing.server import StandaloneProcess, free_port
from magnetar.testing.zookeeper import ZooKeeperProcess
from tests.cluster.conftest import Cluster, wait_for

pytestmark = pytest.mark.slow
SHED = ["--load-balancer-shedding-interval-s", "1", "--load-balancer-shedding-grace-s", "600"]
PARTITIONS = 8
BUNDLES = {range_name(lo, hi) for lo, hi in itertools.pairwise(equal_boundaries())}


def _spread_topic() -> str:
    """A topic whose partitions fall in every one of the namespace's four bundles."""
    for i in itertools.count():
        name = f"spread-{uuid.uuid4().hex[:6]}-{i}"
        parts = [f"persistent://public/default/{name}-partition-{p}" for p in range(PARTITIONS)]
        if {bundle_of(TopicName.parse(p)) for p in parts} == BUNDLES:
            return name
    raise AssertionError("unreachable")


class Calls:
    """HTTP calls to the brokers with one role's token."""

    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}

    def __call__(self, method: str, url: str, body: Any = None, **headers: str) -> Any:
        return requests.request(
            method, url, json=body, headers={**self.headers, **headers}, timeout=30
        )


def _owners(admin: Calls, http: str) -> dict[str, str | None]:
    answer = admin("GET", f"{http}/admin/v2/namespaces/public/default/bundles")
    assert answer.status_code == 200, answer.text
    owners: dict[str, str | None] = answer.json()["bundles"]
    return owners


def _look_up(admin: Calls, http: str, topic: str) -> None:
    for p in range(PARTITIONS):
        path = f"/lookup/v2/topic/persistent/public/default/{topic}-partition-{p}"
        answer = admin("GET", f"{http}{path}")
        assert answer.status_code == 200, answer.text


def test_brokers_call_each_other_with_their_credential(
    zookeeper: ZooKeeperProcess, tmp_path: Path, spark: Any
) -> None:
    key = tmp_path / "secret.key"
    key.write_bytes(secret_key())
    tokens = {r: create_token(r, key.read_bytes()) for r in ("admin", "broker", "reader", "bob")}
    (tmp_path / "broker.token").write_text(tokens["broker"])
    auth = ["--authentication-enabled", "true", "--token-secret-key", f"file://{key}",
            "--authorization-enabled", "true", "--superuser-roles", "admin,broker",
            "--broker-client-auth-token", f"file://{tmp_path / 'broker.token'}"]  # fmt: skip
    # the brokers call each other over https, which requires a trusted client certificate
    ca = TestCA(tmp_path / "certs")
    server, client = ca.server(), ca.client("broker")

    def tls() -> list[str]:
        return ["--tls-enabled", "true", "--pulsar-tls-port", str(free_port()),
                "--https-port", str(free_port()), "--kafka-ssl-port", str(free_port()),
                "--tls-certificate-file", str(server.cert), "--tls-key-file", str(server.key),
                "--tls-trust-certs-file", str(ca.cert),
                "--tls-require-trusted-client-cert", "true",
                "--broker-client-tls-enabled", "true",
                "--broker-client-certificate-file", str(client.cert),
                "--broker-client-key-file", str(client.key)]  # fmt: skip

    url = zookeeper.url(f"/auth-{uuid.uuid4().hex[:8]}") + "?sessionTimeoutMs=3000"
    cluster = Cluster(tmp_path, url)
    admin, reader, bob = Calls(tokens["admin"]), Calls(tokens["reader"]), Calls(tokens["bob"])
    try:
        for _ in range(2):
            cluster.add_node()
        a = cluster.add_broker(*SHED, *auth, *tls())
        topic = _spread_topic()
        base = f"{a.http_url}/admin/v2/persistent/public/default/{topic}"
        assert admin("PUT", f"{base}/partitions", PARTITIONS).status_code == 204
        grant = f"{a.http_url}/admin/v2/namespaces/public/default/permissions/reader"
        assert admin("POST", grant, ["consume"]).status_code == 204
        _look_up(admin, a.http_url, topic)  # a alone: it takes every bundle
        assert set(_owners(admin, a.http_url).values()) == {f"127.0.0.1:{a.pulsar_port}"}

        # shedding: the leader (a) unloads bundles of its own, then of b once lookups have
        # placed them there, through b's admin REST with the broker credential
        b = cluster.add_broker(*SHED, *auth, *tls())

        def balanced() -> bool:
            _look_up(admin, b.http_url, topic)
            held = Counter(_owners(admin, b.http_url).values())
            return sorted(held.values()) == [2, 2] and None not in held

        wait_for(balanced, 90, "two bundles on each broker")
        assert any("load shedding: unloading bundle" in line for line in a.output)
        assert not any("refused to unload" in line for s in (a, b) for line in s.output)

        sent = _publish(a, tokens["admin"], topic)
        _spark_reads(spark, a, b, tokens, topic, sent)
        _refusals(a, b, reader, bob, topic)
        _kafka_commits(a, b, tokens, topic)
        _kafka_transaction(a, tokens, topic)

        # a namespace unload asked of b unloads a's bundles too (b calls a)
        unload = f"{b.http_url}/admin/v2/namespaces/public/default/unload"
        answer = admin("PUT", unload)
        assert answer.status_code == 204, answer.text
        assert set(_owners(admin, a.http_url).values()) == {None}
    finally:
        cluster.stop()


def _publish(a: StandaloneProcess, token: str, topic: str) -> list[bytes]:
    client = pulsar.Client(a.pulsar_url, authentication=pulsar.AuthenticationToken(token))
    try:
        producer = client.create_producer(
            f"persistent://public/default/{topic}", batching_enabled=False
        )
        sent = [f"m-{i:03d}".encode() for i in range(80)]
        for value in sent:
            producer.send(value)
        return sent
    finally:
        client.close()


def _spark_reads(
    spark: Any,
    a: StandaloneProcess,
    b: StandaloneProcess,
    tokens: dict[str, str],
    topic: str,
    sent: list[bytes],
) -> None:
    """Planned on either broker (each owns half the partitions), read with the owners'
    grants; bob, without consume, is refused by both."""
    name = f"persistent://public/default/{topic}"
    for broker in (a, b):
        df = (
            spark.read.format("magnetar")
            .option("url", broker.http_url)
            .option("token", tokens["reader"])
            .option("topic", name)
            .load()
        )
        assert sorted(bytes(r.value) for r in df.select("value").collect()) == sent
        with pytest.raises(Exception, match="not allowed to consume"):
            spark.read.format("magnetar").option("url", broker.http_url).option(
                "token", tokens["bob"]
            ).option("topic", name).load().count()


def _refusals(
    a: StandaloneProcess, b: StandaloneProcess, reader: Calls, bob: Calls, topic: str
) -> None:
    for broker in (a, b):
        plan = f"{broker.http_url}/magnetar/v1/topics/public/default/{topic}/plan"
        answer = reader("GET", plan)
        assert answer.status_code == 200, answer.text
        parts = answer.json()["partitions"]
        assert len({p["flight"] for p in parts}) == 2  # both brokers' partitions
        assert all(p["grant"].startswith("reader:") for p in parts)
        refused = bob("GET", plan)
        assert refused.status_code == 403 and "not allowed to consume" in refused.text
        # only a super-user (a broker's credential) may ask on behalf of another role
        forged = bob("GET", plan, **{"X-Original-Principal": "reader"})
        assert forged.status_code == 403 and "super-user" in forged.json()["reason"]


def _kafka_commits(
    a: StandaloneProcess, b: StandaloneProcess, tokens: dict[str, str], topic: str
) -> None:
    """Offsets committed through either broker, for partitions owned by both, are stored
    by the owners (the coordinator forwards them) and fetched back."""
    for broker, group in ((a, "g-a"), (b, "g-b")):
        consumer = _consumer(broker, tokens["reader"], group)
        try:
            offsets = [TopicPartition(topic, p, p + 1) for p in range(PARTITIONS)]
            consumer.commit(offsets=offsets, asynchronous=False)
            got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
            assert [(t.partition, t.offset, t.error) for t in got] == [
                (p, p + 1, None) for p in range(PARTITIONS)
            ]
        finally:
            consumer.close()
        refused = _consumer(broker, tokens["bob"], group)
        try:
            with pytest.raises(KafkaException, match=r"GROUP_AUTHORIZATION_FAILED|[Aa]uthoriz"):
                refused.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            refused.close()


def _kafka_transaction(a: StandaloneProcess, tokens: dict[str, str], topic: str) -> None:
    """A transaction over partitions of both brokers commits: its coordinator writes the
    COMMIT markers at the other broker (with the broker credential), so a read_committed
    consumer sees every record."""
    producer = Producer({**_sasl(a, tokens["admin"]), "transactional.id": "tx-auth"})
    producer.init_transactions(30)
    producer.begin_transaction()
    values = {f"tx-{p}".encode() for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        producer.produce(topic, f"tx-{p}".encode(), partition=p)
    producer.commit_transaction(60)
    consumer = Consumer(
        {**_sasl(a, tokens["reader"]), "group.id": "g-tx", "isolation.level": "read_committed",
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: set[bytes] = set()

        def all_seen() -> bool:
            for m in consumer.consume(100, 1):
                if m.error() is None and (m.value() or b"").startswith(b"tx-"):
                    seen.add(m.value() or b"")
            return seen == values

        wait_for(all_seen, 60, "the committed transaction's records")
    finally:
        consumer.close()


def _sasl(broker: StandaloneProcess, token: str) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.kafka_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "user",
        "sasl.password": f"token:{token}",
    }


def _consumer(broker: StandaloneProcess, token: str, group: str) -> Consumer:
    return Consumer({**_sasl(broker, token), "group.id": group, "enable.auto.commit": False})
