"""A client pinned to Kafka 3.0's API versions (kafka-python with ``api_version=(3, 0)``
skips version negotiation) uses CreateTopics v7 and FindCoordinator v4 (KIP-699): both
are served, so such a client creates topics and joins groups instead of being cut off."""

from __future__ import annotations

import uuid

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient

KAFKA_30 = (3, 0)


def test_create_topics_v7_answers_the_created_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, api_version=KAFKA_30)
    try:
        answer = admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})
        (result,) = answer["topics"]
        assert (result["error_code"], result["num_partitions"]) == (0, 3)
        assert result["replication_factor"] == 1
        assert uuid.UUID(str(result["topic_id"])).int != 0
        again = admin.create_topics({topic: {"num_partitions": 3}}, raise_errors=False)
        assert again["topics"][0]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
        assert again["topics"][0]["topic_id"] is None  # Kafka's zero id: none
    finally:
        admin.close()


def test_a_group_finds_its_coordinator_with_v4(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=KAFKA_30)
    for i in range(5):
        producer.send(topic, f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        api_version=KAFKA_30,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    try:
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == 5:
                break
        consumer.commit()
        assert sorted(got) == [f"m{i}".encode() for i in range(5)]
        (tp,) = consumer.assignment()
        assert consumer.committed(tp) == 5  # the commit went to the coordinator found with v4
    finally:
        consumer.close()
