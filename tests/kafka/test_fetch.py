"""Fetch as a long poll: it answers as soon as min_bytes are there, and honours the byte
limits (always at least one batch, so a consumer can never get stuck)."""

from __future__ import annotations

import threading
import time

from magnetar.protocols.kafka import records
from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka, make_batch

from kafka.protocol.consumer import FetchRequest  # isort: skip


def _fetch(raw: RawKafka, topic: str, offset: int, *, wait_ms: int, max_bytes: int) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=max_bytes
    )
    request = FetchRequest[11](
        replica_id=-1,
        max_wait_ms=wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    answer = raw.request(request).responses[0].partitions[0]
    assert answer.error_code == 0
    return bytes(answer.records)


def test_a_waiting_fetch_answers_when_data_arrives(
    standalone: StandaloneProcess, raw: RawKafka, topic: str
) -> None:
    assert raw.produce(topic, make_batch(2)) == (0, 0)
    got: list[bytes] = []
    waiter = threading.Thread(
        target=lambda: got.append(_fetch(raw, topic, 2, wait_ms=20_000, max_bytes=1 << 20))
    )
    started = time.monotonic()
    waiter.start()
    producer = RawKafka(standalone.kafka_port)
    try:
        assert producer.produce(topic, make_batch(3)) == (0, 2)
    finally:
        producer.close()
    waiter.join(20)
    assert time.monotonic() - started < 10  # answered by the append, not by max_wait_ms
    [batch] = list(records.split(got[0]))
    assert records.read_header(batch).base_offset == 2
    assert len(records.decode(batch)) == 3


def test_byte_limits_still_return_at_least_one_batch(raw: RawKafka, topic: str) -> None:
    for i in range(3):
        assert raw.produce(topic, make_batch(10)) == (0, i * 10)
    one = list(records.split(_fetch(raw, topic, 0, wait_ms=0, max_bytes=10)))
    assert [records.read_header(b).base_offset for b in one] == [0]  # bigger than 10 bytes
    size = len(one[0])
    two = list(records.split(_fetch(raw, topic, 0, wait_ms=0, max_bytes=2 * size)))
    assert [records.read_header(b).base_offset for b in two] == [0, 10]
    inside = list(records.split(_fetch(raw, topic, 15, wait_ms=0, max_bytes=size)))
    assert [records.read_header(b).base_offset for b in inside] == [10]  # the batch holding 15
