"""Produce and consume with the real clients: every compression codec, keys, headers."""

from __future__ import annotations

import asyncio
import time

import aiokafka
import confluent_kafka
import kafka
import pytest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 50


def _records(n: int = N) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (f"key-{i}".encode(), f"value-{i}-".encode() * (i % 7 + 1), [("h", f"{i}".encode())])
        for i in range(n)
    ]


def _consume_confluent(bootstrap: str, topic: str, n: int) -> list[confluent_kafka.Message]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[confluent_kafka.Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(bootstrap: str, topic: str, codec: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
    )
    sent = _records()
    for key, value, headers in sent:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0
    got = _consume_confluent(bootstrap, topic, N)
    assert [(m.key(), m.value(), m.headers()) for m in got] == sent
    assert [m.offset() for m in got] == list(range(N))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(bootstrap: str, topic: str, codec: str) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec
    )
    sent = _records()
    futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in sent]
    offsets = [f.get(timeout=30).offset for f in futures]
    producer.close()
    assert offsets == list(range(N))
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    got = []
    for msg in consumer:
        got.append((msg.key, msg.value, msg.headers))
        if len(got) == N:
            break
    consumer.close()
    assert got == sent


@pytest.mark.parametrize("codec", CODECS)
async def test_aiokafka_round_trip(bootstrap: str, topic: str, codec: str) -> None:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec
    )
    await producer.start()
    sent = _records()
    try:
        results = [await producer.send_and_wait(topic, v, key=k, headers=h) for k, v, h in sent]
    finally:
        await producer.stop()
    assert [r.offset for r in results] == list(range(N))
    consumer = aiokafka.AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}", auto_offset_reset="earliest"
    )
    await consumer.start()
    got = []
    try:
        async with asyncio.timeout(30):
            async for msg in consumer:
                got.append((msg.key, msg.value, list(msg.headers)))
                if len(got) == N:
                    break
    finally:
        await consumer.stop()
    assert got == sent
