"""Cross-protocol without loss (issue 23, item 5): a Kafka record with a binary key, binary
and null header values, a repeated header name and a null value reaches a Pulsar consumer
with every byte recoverable, and when that consumer sends the message on with the same
properties, Kafka consumers get the headers back byte-identical."""

from __future__ import annotations

import base64
import time

import confluent_kafka
import pulsar

from magnetar.protocols.kafka import properties
from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import TIMEOUT_S

KEY = b"\xff\x00\x80key"
HEADERS = [("bin", b"\xfe\xff\x00"), ("dup", b"one"), ("dup", b"two"), ("none", None)]


def _pulsar_client(server: StandaloneProcess) -> pulsar.Client:
    return pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _kafka_records(bootstrap: str, topic: str, n: int) -> list[confluent_kafka.Message]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    got: list[confluent_kafka.Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_kafka_bytes_reach_pulsar_and_come_back(
    standalone: StandaloneProcess, bootstrap: str, topic: str
) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=KEY, value=b"payload", headers=HEADERS)
    producer.produce(topic, key=b"tomb", value=None)
    assert producer.flush(TIMEOUT_S) == 0

    client = _pulsar_client(standalone)
    try:
        consumer = client.subscribe(
            f"persistent://public/default/{topic}",
            "pulsar-side",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        first, tombstone = consumer.receive(10_000), consumer.receive(10_000)
        assert first.data() == b"payload" and not first.has_null_value()
        assert base64.b64decode(first.partition_key()) == KEY
        assert tombstone.has_null_value() and tombstone.partition_key() == "tomb"
        props = first.properties()
        assert (props["bin"], props["dup"], props["none"]) == ("/v8A", "one", "")
        assert properties.to_headers(props.items()) == tuple(HEADERS)

        # Sent on by a Pulsar producer with the same properties: Kafka sees the headers.
        forward = client.create_producer(f"persistent://public/default/{topic}-forward")
        forward.send(first.data(), properties=props, partition_key="k")
    finally:
        client.close()
    [back] = _kafka_records(bootstrap, f"{topic}-forward", 1)
    assert back.headers() == HEADERS and back.value() == b"payload"
    [got, tomb] = _kafka_records(bootstrap, topic, 2)  # and Kafka → Kafka is untouched
    assert (got.key(), got.headers(), tomb.value()) == (KEY, HEADERS, None)
