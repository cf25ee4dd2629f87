"""Commit metadata: the text a consumer commits with an offset comes back from committed(),
also after a restart (issue 23, item 3; confluent-kafka-python's integration test commits
metadata 'hello world' and reads it back). Kafka refuses metadata over 4096 bytes."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import kafka
import pytest
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

from magnetar.testing.server import StandaloneProcess


def _consumer(bootstrap: str, group: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )


def _committed(bootstrap: str, group: str, topic: str) -> tuple[int, str | None]:
    consumer = _consumer(bootstrap, group)
    try:
        [tp] = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=20)
        return tp.offset, tp.metadata
    finally:
        consumer.close()


@pytest.mark.slow
def test_confluent_commit_metadata_survives_a_restart(tmp_path: Path) -> None:
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        for i in range(5):
            producer.produce("meta", value=b"m%d" % i)
        assert producer.flush(30) == 0
        consumer = _consumer(bootstrap, "g-meta")
        try:
            tp = confluent_kafka.TopicPartition("meta", 0, 3, metadata="hello world")
            consumer.commit(offsets=[tp], asynchronous=False)
        finally:
            consumer.close()
        assert _committed(bootstrap, "g-meta", "meta") == (3, "hello world")
        server.stop()
        server.start()
        assert _committed(bootstrap, "g-meta", "meta") == (3, "hello world")
    finally:
        server.stop()


def test_kafka_python_commit_metadata_and_its_limit(bootstrap: str, topic: str) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, b"x").get(timeout=30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"g-{topic}", enable_auto_commit=False
    )
    tp = KpTopicPartition(topic, 0)
    try:
        consumer.commit({tp: OffsetAndMetadata(1, "kp metadata", -1)})
        assert consumer.committed(tp, metadata=True).metadata == "kp metadata"
        with pytest.raises(kafka.errors.OffsetMetadataTooLargeError):
            consumer.commit({tp: OffsetAndMetadata(1, "x" * 4097, -1)})
        # The refused commit changed nothing.
        found = consumer.committed(tp, metadata=True)
        assert (found.offset, found.metadata) == (1, "kp metadata")
    finally:
        consumer.close()


@pytest.mark.slow
def test_the_committed_leader_epoch_comes_back_after_a_restart(tmp_path: Path) -> None:
    """KIP-320: OffsetCommit v6+ carries the leader epoch of the committed offset, and
    OffsetFetch v5+ returns it (kafka-python's admin list_group_offsets shows it)."""
    server = StandaloneProcess(tmp_path / "data").start()
    try:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
        producer.send("epochs", b"x").get(20)
        producer.close()
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id="g-epoch")
        tp = KpTopicPartition("epochs", 0)
        consumer.commit({tp: OffsetAndMetadata(1, "meta", 0)})
        consumer.close()
        server.stop()
        server.start()
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            offsets = admin.list_group_offsets("g-epoch")["g-epoch"]
        finally:
            admin.close()
        assert offsets[tp] == OffsetAndMetadata(1, "meta", 0)
    finally:
        server.stop()
