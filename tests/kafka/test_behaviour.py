"""Kafka behaviours users rely on (issue 17): a 5 MiB record fits the default limits with its
batch overhead, as Pulsar's 5 MiB maxMessageSize lets a 5 MiB message through; and
offsets_for_times on a partition that does not exist fails as with Kafka (the metadata
knows no such partition) instead of hanging."""

from __future__ import annotations

import confluent_kafka
import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.structs import TopicPartition as KpTopicPartition

from tests.kafka.conftest import TIMEOUT_S, RawKafka

FIVE_MIB = 5 * 1024 * 1024
CLIENT_LIMIT = 6 * 1024 * 1024  # the clients' own limits, raised above 5 MiB


def test_confluent_five_mib_record_round_trips(bootstrap: str, topic: str) -> None:
    value = bytes(range(256)) * (FIVE_MIB // 256)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": CLIENT_LIMIT})
    errors: list[KafkaError | None] = []
    producer.produce(topic, value, key=b"k", headers=[("h", b"v")],
                     on_delivery=lambda err, _: errors.append(err))  # fmt: skip
    producer.flush(TIMEOUT_S)
    assert errors == [None]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        assert message.value() == value
    finally:
        consumer.close()


def test_kafka_python_five_mib_record_is_stored(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=CLIENT_LIMIT)
    try:
        stored = producer.send(topic, b"x" * FIVE_MIB).get(TIMEOUT_S)
    finally:
        producer.close()
    assert stored.offset == 0


def test_default_max_message_bytes_is_the_batch_limit(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert int(configs["max.message.bytes"].value) > FIVE_MIB  # a 5 MiB record's batch fits
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([broker])[broker].result(TIMEOUT_S)
    assert int(configs["message.max.bytes"].value) > FIVE_MIB


def test_a_batch_over_the_limit_is_refused(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 8 * 1024 * 1024})
    errors: list[KafkaError] = []
    producer.produce(
        topic, b"x" * (FIVE_MIB + 64 * 1024), on_delivery=lambda e, _: errors.append(e)
    )
    producer.flush(TIMEOUT_S)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]


def test_offsets_for_times_on_a_missing_partition_fails(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic})
    try:
        with pytest.raises(confluent_kafka.KafkaException) as failed:
            consumer.offsets_for_times([TopicPartition(topic, 7, 0)], timeout=TIMEOUT_S)
        assert failed.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    finally:
        consumer.close()
    # kafka-python and aiokafka wait for the partition to appear in the metadata until
    # their request timeout, then fail with KafkaTimeoutError, as against Kafka
    kp = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            kp.offsets_for_times({KpTopicPartition(topic, 7): 0})
    finally:
        kp.close()


def test_list_offsets_for_a_missing_partition_is_unknown(raw: RawKafka, topic: str) -> None:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=7, timestamp=0)
    request = ListOffsetsRequest[1](
        replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])]
    )
    answer = raw.request(request).topics[0].partitions[0]
    assert answer.error_code == KafkaError.UNKNOWN_TOPIC_OR_PART
