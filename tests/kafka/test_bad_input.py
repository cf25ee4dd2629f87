"""Bad input gets Kafka's answer — an error code, or the connection closed where Kafka closes
it — and never disturbs other connections or stored data."""

from __future__ import annotations

import struct

import pytest

from magnetar.protocols.kafka import legacy, records
from magnetar.protocols.kafka.compression import GZIP
from magnetar.testing.server import StandaloneProcess
from tests.kafka.conftest import RawKafka, make_batch

from kafka.protocol.consumer import FetchRequest  # isort: skip
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest  # isort: skip
from kafka.protocol.producer import InitProducerIdRequest  # isort: skip

TS = 1_700_000_000_000


def _request_bytes(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _still_serves(port: int) -> None:
    other = RawKafka(port)
    try:
        assert other.request(ApiVersionsRequest[0]()).error_code == 0
    finally:
        other.close()


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="truncated-header"),
        pytest.param(_request_bytes(3, 1, b"\x00\x00\x00\x05\x00\x02ab"), id="truncated-body"),
        pytest.param(_request_bytes(0, 7, b"\x13" * 40), id="garbage-body"),
        pytest.param(struct.pack(">i", -5) + b"junk", id="negative-size"),
        pytest.param(_request_bytes(0, 99, b""), id="unsupported-produce-version"),
        pytest.param(_request_bytes(999, 0, b""), id="unknown-api"),
    ],
)
def test_bad_request_closes_only_that_connection(
    standalone: StandaloneProcess, raw: RawKafka, frame: bytes
) -> None:
    raw.send_bytes(frame)
    assert raw.read_frame() is None  # closed, as Kafka does
    _still_serves(standalone.kafka_port)


def test_unknown_api_versions_version_gets_the_kip511_answer(raw: RawKafka) -> None:
    raw.send_bytes(_request_bytes(18, 99, b"", correlation_id=42))
    frame = raw.read_frame()
    assert frame is not None
    correlation_id, error, count = struct.unpack_from(">ihi", frame)
    assert (correlation_id, error, count) == (42, 35, 1)
    assert struct.unpack_from(">hhh", frame, 10) == (18, 0, 2)
    assert raw.request(ApiVersionsRequest[2]()).error_code == 0  # the connection lives on


def test_batch_with_bad_crc_is_refused_and_not_stored(raw: RawKafka, topic: str) -> None:
    good = make_batch()
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # flip a bit in the last record
    assert raw.produce(topic, good) == (0, 0)
    assert raw.produce(topic, bytes(bad))[0] == 2  # CORRUPT_MESSAGE
    assert raw.end_offset(topic) == 3  # nothing of it was stored
    assert raw.produce(topic, good) == (0, 3)  # the connection and topic are fine


def test_fetch_out_of_range(raw: RawKafka, topic: str) -> None:
    raw.produce(topic, make_batch())
    for offset in (-5, 4, 1000):
        part = FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
        )
        request = FetchRequest[11](
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        )
        answer = raw.request(request).responses[0].partitions[0]
        assert (answer.error_code, answer.high_watermark) == (1, 3)  # OFFSET_OUT_OF_RANGE


def test_fetch_at_the_end_waits_then_returns_empty(raw: RawKafka, topic: str) -> None:
    raw.produce(topic, make_batch())
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=3, partition_max_bytes=1 << 20
    )
    request = FetchRequest[4](
        replica_id=-1,
        max_wait_ms=200,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    answer = raw.request(request).responses[0].partitions[0]
    assert (answer.error_code, answer.high_watermark, answer.records) == (0, 3, b"")


def test_unknown_topic_in_metadata_without_auto_creation(raw: RawKafka, topic: str) -> None:
    request = MetadataRequest[4](
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    assert raw.request(request).topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    bad = MetadataRequest[4](
        topics=[MetadataRequest.MetadataRequestTopic(name="no/slashes")],
        allow_auto_topic_creation=True,
    )
    assert raw.request(bad).topics[0].error_code == 17  # INVALID_TOPIC_EXCEPTION


def test_idempotent_sequences(raw: RawKafka, topic: str) -> None:
    init = raw.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=1))
    ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    first = make_batch(3, base_sequence=0, **ids)
    assert raw.produce(topic, first) == (0, 0)
    assert raw.produce(topic, first) == (0, 0)  # a retry: the original's offset, not stored
    assert raw.produce(topic, make_batch(2, base_sequence=3, **ids)) == (0, 3)
    assert raw.produce(topic, make_batch(2, base_sequence=9, **ids))[0] == 45  # a gap
    stale = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch - 1}
    assert raw.produce(topic, make_batch(1, base_sequence=5, **stale))[0] == 47  # fenced epoch
    assert raw.end_offset(topic) == 5


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_accepted(raw: RawKafka, topic: str, magic: int) -> None:
    recs = [records.Record(b"k%d" % i, b"v%d" % i, TS + i) for i in range(4)]
    assert raw.produce(topic, legacy.encode(recs[:2], magic=magic)) == (0, 0)
    assert raw.produce(topic, legacy.encode(recs[2:], magic=magic, codec=GZIP)) == (0, 2)
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    request = FetchRequest[4](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    data = raw.request(request).responses[0].partitions[0].records
    got = [r for batch in records.split(data) for r in records.decode(batch)]
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]
    if magic == 1:
        assert [r.timestamp for r in got] == [r.timestamp for r in recs]
