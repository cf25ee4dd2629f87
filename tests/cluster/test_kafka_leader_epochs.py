"""OffsetForLeaderEpoch and DescribeQuorum with two brokers: a partition's epoch end comes
from its owner, the other broker answers NOT_LEADER_OR_FOLLOWER; the quorum's voters are the
live brokers and its leader the controller Metadata names."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

# before kafka-python: wire.py silences its schema loading's deprecation warning
from magnetar.protocols.kafka import wire  # noqa: F401
from tests.cluster.conftest import Cluster, wait_for
from tests.kafka.conftest import RawKafka
from tests.kafka.test_leader_epochs import epoch_ends

from kafka import KafkaAdminClient  # isort: skip

pytestmark = pytest.mark.slow
NOT_LEADER_OR_FOLLOWER = 6
PARTITIONS = 8


def test_only_the_owner_answers_and_the_quorum_lists_both(cluster: Cluster) -> None:
    cluster.add_node()
    brokers = [cluster.add_broker(), cluster.add_broker()]
    bootstrap = f"127.0.0.1:{brokers[0].kafka_port}"
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)

    def leaders() -> dict[int, int] | None:
        meta = admin.list_topics(topic, timeout=30).topics[topic].partitions
        found = {i: p.leader for i, p in meta.items()}
        return found if len(found) == PARTITIONS and len(set(found.values())) == 2 else None

    owners = wait_for(leaders, 60, "partitions owned by both brokers")
    node_ids = sorted(set(owners.values()))
    meta = admin.list_topics(timeout=30)
    ports = {b.id: b.port for b in meta.brokers.values()}
    for mine in (True, False):  # the owners first: an unowned partition goes to who asks
        for node_id, port in ports.items():
            asks = [(i, 0) for i, owner in owners.items() if (owner == node_id) == mine]
            raw = RawKafka(port)
            try:
                found = epoch_ends(raw, topic, asks)
            finally:
                raw.close()
            want = (0, 0, 0) if mine else (NOT_LEADER_OR_FOLLOWER, -1, -1)
            assert [f[1:] for f in found] == [want] * len(asks)
    assert leaders() == owners

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        quorum = client.describe_metadata_quorum()
    finally:
        client.close()
    [partition] = quorum["topics"][0]["partitions"]
    assert partition["leader_id"] == meta.controller_id == min(node_ids)
    assert sorted(v["replica_id"] for v in partition["current_voters"]) == node_ids
