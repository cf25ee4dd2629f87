"""ListOffsets: earliest, latest, by timestamp (offsets_for_times); seek."""

from __future__ import annotations

import time

import confluent_kafka
import kafka
from kafka.structs import TopicPartition

BASE_TS = 1_700_000_000_000
N = 30


def _produce_timestamped(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(N):  # one record per second of event time, in batches of several
        producer.produce(topic, value=f"m{i}".encode(), timestamp=BASE_TS + i * 1000)
    assert producer.flush(30) == 0


def test_kafka_python_offsets_for_times_and_seek(bootstrap: str, topic: str) -> None:
    _produce_timestamped(bootstrap, topic)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10_000)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: N}
        found = consumer.offsets_for_times({tp: BASE_TS + 12_500})
        assert found[tp].offset == 13 and found[tp].timestamp == BASE_TS + 13_000
        exact = consumer.offsets_for_times({tp: BASE_TS + 7_000})
        assert exact[tp].offset == 7
        assert consumer.offsets_for_times({tp: BASE_TS + 10 * N * 1000})[tp] is None
        consumer.seek(tp, found[tp].offset)
        first = next(iter(consumer))
        assert (first.offset, first.value, first.timestamp) == (13, b"m13", BASE_TS + 13_000)
        consumer.seek_to_beginning(tp)
        assert next(iter(consumer)).offset == 0
    finally:
        consumer.close()


def test_confluent_kafka_offsets_for_times_and_seek(bootstrap: str, topic: str) -> None:
    _produce_timestamped(bootstrap, topic)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, BASE_TS + 20_000)
        [found] = consumer.offsets_for_times([tp], timeout=10)
        assert found.offset == 20
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), 10)
        assert (low, high) == (0, N)
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, found.offset)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < N - 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.offset())
        assert got == list(range(20, N))
        consumer.seek(confluent_kafka.TopicPartition(topic, 0, 5))
        msg = None
        while msg is None or msg.error() is not None:
            msg = consumer.poll(0.5)
        assert msg.offset() == 5
    finally:
        consumer.close()
