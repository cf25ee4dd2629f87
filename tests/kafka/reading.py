"""Reading a Kafka topic to its end with a real consumer, for tests of any area that check
what Kafka consumers see (transactions, compaction, the Spark source's Kafka side)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message

from tests.kafka.conftest import TIMEOUT_S


def read_to_end(
    bootstrap: str,
    topic: str,
    expect: int,
    *,
    isolation: str = "read_uncommitted",
    partitions: int = 1,
    timeout_s: float = TIMEOUT_S,
) -> list[Message]:
    """Every record a fresh consumer (new group, from the earliest offset, ``isolation``)
    reads of ``topic``: until ``expect`` arrived and each of its ``partitions`` reported its
    end after the last record read there. Fails after ``timeout_s`` with what it read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.partition.eof": True})  # fmt: skip
    consumer.subscribe([topic])
    got: list[Message] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < expect or len(at_end) < partitions:
            assert time.monotonic() < deadline, f"read {[m.value() for m in got]} of {expect}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            got.append(message)
    finally:
        consumer.close()
    return got
