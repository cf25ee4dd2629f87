"""OffsetForLeaderEpoch (API 23) and DescribeQuorum (API 55) with kafka-python: every
partition has one leader epoch, 0, ending at the partition's end offset; the metadata quorum
is this node alone (multi-broker answers: tests/cluster/test_kafka_leader_epochs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.admin import DescribeQuorumRequest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest

from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka

TOPIC = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
PARTITION = TOPIC.OffsetForLeaderPartition
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_LEADER_EPOCH = 3, 75


def epoch_ends(
    raw: RawKafka, topic: str, asks: list[tuple[int, int]], *, version: int = 4, current: int = -1
) -> list[tuple[int, int, int, int]]:
    """(partition, error, leader epoch, end offset) for each (partition, requested epoch)."""
    parts = [PARTITION(partition=p, current_leader_epoch=current, leader_epoch=e) for p, e in asks]
    request = OffsetForLeaderEpochRequest[version](
        replica_id=-1, topics=[TOPIC(topic=topic, partitions=parts)]
    )
    answer = raw.request(request).topics[0]
    assert answer.topic == topic
    return [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in answer.partitions]


@pytest.fixture
def filled(standalone: StandaloneProcess, topic: str) -> Iterator[str]:
    """``topic`` with 2 partitions: 5 records in partition 0, none in partition 1."""
    bootstrap = f"127.0.0.1:{standalone.kafka_port}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(5):
        producer.send(topic, b"v%d" % i, partition=0).get(timeout=20)
    producer.close()
    yield topic


@pytest.mark.parametrize("version", [2, 3, 4])
def test_epoch_zero_ends_at_the_end_offset(raw: RawKafka, filled: str, version: int) -> None:
    found = epoch_ends(raw, filled, [(0, 0), (1, 0), (0, -1)], version=version)
    assert found == [(0, 0, 0, 5), (1, 0, 0, 0), (0, 0, 0, 5)]


def test_a_later_epoch_is_undefined(raw: RawKafka, filled: str) -> None:
    assert epoch_ends(raw, filled, [(0, 1), (0, 7)]) == [(0, 0, -1, -1), (0, 0, -1, -1)]


def test_a_current_epoch_above_zero_is_unknown(raw: RawKafka, filled: str) -> None:
    assert epoch_ends(raw, filled, [(0, 0)], current=3) == [(0, UNKNOWN_LEADER_EPOCH, -1, -1)]
    assert epoch_ends(raw, filled, [(0, 0)], current=0) == [(0, 0, 0, 5)]


def test_unknown_topics_and_partitions(raw: RawKafka, filled: str, topic: str) -> None:
    assert epoch_ends(raw, filled, [(2, 0)]) == [(2, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    missing = topic + "-missing"
    assert epoch_ends(raw, missing, [(0, 0)]) == [(0, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


def test_describe_metadata_quorum_names_this_node(standalone: StandaloneProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{standalone.kafka_port}")
    try:
        node_id = admin.describe_cluster()["controller_id"]
        result = admin.describe_metadata_quorum()
    finally:
        admin.close()
    [partition] = result["topics"][0]["partitions"]
    assert result["topics"][0]["topic_name"] == "__cluster_metadata"
    assert partition["error"] is None
    assert (partition["leader_id"], partition["leader_epoch"]) == (node_id, 0)
    assert partition["high_watermark"] == 0
    assert [v["replica_id"] for v in partition["current_voters"]] == [node_id]
    assert partition["observers"] == []
    [node] = result["nodes"]
    assert node["node_id"] == node_id
    assert node["listeners"][0]["port"] == standalone.kafka_port


def test_describe_quorum_of_another_topic_is_unknown(raw: RawKafka) -> None:
    data = DescribeQuorumRequest.TopicData
    request = DescribeQuorumRequest[0](
        topics=[data(topic_name="orders", partitions=[data.PartitionData(partition_index=0)])]
    )
    answer = raw.request(request)
    assert answer.error_code == 0
    assert answer.topics[0].partitions[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
