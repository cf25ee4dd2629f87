"""A group member asking for a session timeout outside group_min/max_session_timeout_ms
(6 s .. 30 min by default, as in Kafka) is refused with INVALID_SESSION_TIMEOUT, and the
clients surface it at once instead of joining (issue 23, item 4)."""

from __future__ import annotations

import time

import aiokafka
import confluent_kafka
import kafka
import pytest

from tests.kafka.conftest import TIMEOUT_S


def test_kafka_python_gets_invalid_session_timeout(bootstrap: str, topic: str) -> None:
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic}",
        session_timeout_ms=100,
        heartbeat_interval_ms=50,
    )
    try:
        with pytest.raises(kafka.errors.InvalidSessionTimeoutError):
            consumer.poll(timeout_ms=int(TIMEOUT_S * 1000))
    finally:
        consumer.close()


def test_confluent_kafka_reports_invalid_session_timeout(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "session.timeout.ms": 100,
            "heartbeat.interval.ms": 50,
        }
    )
    consumer.subscribe([topic])
    try:
        errors = []
        deadline = time.monotonic() + TIMEOUT_S
        while not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            assert msg is None or msg.error() is not None, "joined with a 100 ms session"
            if msg is not None:
                errors.append(msg.error().code())
        assert errors == [confluent_kafka.KafkaError.INVALID_SESSION_TIMEOUT]
    finally:
        consumer.close()


async def test_aiokafka_gets_invalid_session_timeout(bootstrap: str, topic: str) -> None:
    consumer = aiokafka.AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic}",
        session_timeout_ms=2_000_000,  # above the 30 min maximum
        request_timeout_ms=2_000_001,
    )
    try:
        with pytest.raises(aiokafka.errors.InvalidSessionTimeoutError):
            await consumer.start()  # start() waits for the group join, which is refused
    finally:
        await consumer.stop()
