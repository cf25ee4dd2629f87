"""A fetch response stays within the request's ``max_bytes`` and the server's
``fetch_max_bytes`` (Kafka's fetch.max.bytes, 50 MiB by default), however much the request
asks for and however large the backlog — but always holds at least one batch, as Kafka's does,
so a batch bigger than the limit still moves the consumer on (issue 22, item 3)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.protocols.kafka import records
from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka

from kafka.protocol.consumer import FetchRequest  # isort: skip

KiB = 1024
SERVER_MAX = 200 * KiB
EVERYTHING = 2**31 - 1


def _batch(size: int) -> bytes:
    return records.encode([records.Record(None, b"v" * size, 1_700_000_000_000)])


def _fetch(raw: RawKafka, topic: str, *, max_bytes: int, partition_max_bytes: int) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=partition_max_bytes
    )
    request = FetchRequest[11](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    answer = raw.request(request).responses[0].partitions[0]
    assert answer.error_code == 0
    return bytes(answer.records)


def _offsets(data: bytes) -> list[int]:
    return [records.read_header(b).base_offset for b in records.split(data)]


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    data: Path = tmp_path_factory.mktemp("fetch-cap")
    with StandaloneProcess(data, extra_args=["--fetch-max-bytes", str(SERVER_MAX)]) as server:
        yield server


@pytest.fixture
def raw(capped: StandaloneProcess) -> Iterator[RawKafka]:
    conn = RawKafka(capped.kafka_port)
    try:
        yield conn
    finally:
        conn.close()


def _topic() -> str:
    return f"fetch-bounds-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_request_max_bytes_bounds_the_response_below_the_partition_limit(raw: RawKafka) -> None:
    topic = _topic()
    batch = _batch(10 * KiB)
    for i in range(10):
        assert raw.produce(topic, batch) == (0, i)
    got = _fetch(raw, topic, max_bytes=3 * len(batch), partition_max_bytes=EVERYTHING)
    assert _offsets(got) == [0, 1, 2]
    assert len(got) <= 3 * len(batch)


@pytest.mark.slow
def test_the_server_maximum_bounds_a_request_asking_for_everything(raw: RawKafka) -> None:
    topic = _topic()
    batch = _batch(50 * KiB)
    for i in range(20):  # 1 MB of backlog, five times the server's maximum
        assert raw.produce(topic, batch) == (0, i)
    got = _fetch(raw, topic, max_bytes=EVERYTHING, partition_max_bytes=EVERYTHING)
    assert 0 < len(got) <= SERVER_MAX
    assert _offsets(got) == list(range(SERVER_MAX // len(batch)))


@pytest.mark.slow
def test_a_first_batch_above_the_server_maximum_still_comes_alone(raw: RawKafka) -> None:
    topic = _topic()
    big = _batch(SERVER_MAX + 10 * KiB)
    assert raw.produce(topic, big) == (0, 0)
    assert raw.produce(topic, _batch(KiB)) == (0, 1)
    got = _fetch(raw, topic, max_bytes=EVERYTHING, partition_max_bytes=EVERYTHING)
    assert _offsets(got) == [0]
    assert len(got) == len(big)
