"""The pure codecs, byte for byte, with no server: record batches, old message sets,
compression, request framing and the Kafka ↔ Pulsar conversion."""

from __future__ import annotations

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker import formats
from magnetar.core.entries import Entry
from magnetar.protocols.kafka import compression, conversion, legacy, records, wire
from magnetar.protocols.kafka.entry_format import KafkaEntryFormat
from magnetar.protocols.kafka.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MalformedRequestError,
    UnsupportedVersionError,
)
from magnetar.protocols.kafka.records import Record

from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest  # isort: skip
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # isort: skip

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
TS = 1_700_000_000_000

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
header = st.tuples(st.text(max_size=8), maybe_bytes)
record = st.builds(
    Record,
    key=maybe_bytes,
    value=maybe_bytes,
    timestamp=st.integers(TS, TS + 10**6),
    headers=st.lists(header, max_size=3).map(tuple),
)


def _numbered(recs: list[Record]) -> list[Record]:
    return [Record(r.key, r.value, r.timestamp, r.headers, i) for i, r in enumerate(recs)]


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(record, min_size=1, max_size=20), codec=st.sampled_from(CODECS))
def test_record_batch_round_trip(recs: list[Record], codec: int) -> None:
    batch = records.encode(recs, codec=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    header = records.validate(batch)
    assert (header.record_count, header.compression, header.last_sequence) == (
        len(recs),
        codec,
        3 + len(recs) - 1,
    )
    assert records.decode(batch) == _numbered(recs)
    moved = records.with_base_offset(batch, 12345)
    assert records.validate(moved).base_offset == 12345  # the CRC does not cover it
    assert records.decode(moved) == _numbered(recs)


def test_crc_mismatch_and_bad_counts_are_refused() -> None:
    batch = bytearray(records.encode([Record(b"k", b"v", TS)]))
    batch[-2] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        records.validate(bytes(batch))
    with pytest.raises(CorruptRecordError):
        records.validate(records.encode([Record(b"k", b"v", TS)])[:-1])
    with pytest.raises(CorruptRecordError):
        list(records.split(b"\x00" * 20))


@given(value=st.binary(min_size=0, max_size=5000))
def test_snappy_reads_xerial_framing_and_raw_blocks(value: bytes) -> None:
    xerial = compression.compress(compression.SNAPPY, value)
    assert xerial.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.SNAPPY, xerial) == value
    raw = bytes(cramjam.snappy.compress_raw(value))  # as librdkafka writes it
    assert compression.decompress(compression.SNAPPY, raw) == value


def test_lz4_is_the_frame_format_and_garbage_is_refused() -> None:
    assert compression.compress(compression.LZ4, b"x" * 100)[:4] == b"\x04\x22\x4d\x18"
    for codec in CODECS[1:]:
        with pytest.raises(CorruptRecordError):
            compression.decompress(codec, b"\x00garbage\xff" * 3)
    with pytest.raises(CorruptRecordError):
        compression.decompress(
            compression.GZIP, compression.compress(compression.GZIP, b"a" * 10_000), max_size=100
        )


@given(
    recs=st.lists(
        st.builds(Record, key=maybe_bytes, value=maybe_bytes, timestamp=st.just(TS)),
        min_size=1,
        max_size=10,
    ),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(CODECS[:3]),
)
def test_old_message_sets_round_trip(recs: list[Record], magic: int, codec: int) -> None:
    data = legacy.encode(recs, magic=magic, codec=codec)
    got, got_codec = legacy.decode(data)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]
    assert [r.timestamp for r in got] == [TS if magic == 1 else -1] * len(recs)
    assert got_codec == codec
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        legacy.decode(bytes(corrupt))


def test_requests_decode_and_responses_encode() -> None:
    request = MetadataRequest[4](
        topics=[MetadataRequest.MetadataRequestTopic(name="t")], allow_auto_topic_creation=True
    )
    request.with_header(correlation_id=9, client_id="me")
    frame = bytes(request.encode(header=True))
    decoded = wire.decode_request(frame)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (
        3,
        4,
        9,
        "me",
    )
    assert [t.name for t in decoded.body.topics] == ["t"]

    produce = ProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=5, topic_data=[])
    produce.with_header(correlation_id=3, client_id="p")
    req = wire.decode_request(bytes(produce.encode(header=True)))
    answer = {
        "responses": [
            {"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 42}]}
        ]
    }
    out = wire.encode_response(req, answer)
    response = ProduceResponse[7].decode(out, header=True, framed=True)
    assert response.header.correlation_id == 3
    part = response.responses[0].partition_responses[0]
    assert (part.base_offset, part.log_start_offset) == (42, -1)  # defaults fill the rest


def test_unsupported_and_malformed_requests() -> None:
    produce = ProduceRequest[10](transactional_id=None, acks=-1, timeout_ms=5, topic_data=[])
    produce.with_header(correlation_id=1, client_id="p")
    with pytest.raises(UnsupportedVersionError):
        wire.decode_request(bytes(produce.encode(header=True)))
    with pytest.raises(MalformedRequestError):
        wire.decode_request(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01")
    with pytest.raises(MalformedRequestError):
        wire.peek(b"\x00\x03")
    answer = wire.api_versions_error(77)
    response = ApiVersionsResponse[3].decode(answer, header=True, framed=True)
    assert response.header.correlation_id == 77 and response.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 2)]


def test_frame_reader_splits_a_stream_and_refuses_oversized_frames() -> None:
    reader = wire.FrameReader(max_frame=10)
    reader.feed(b"\x00\x00\x00\x03ab")
    assert reader.next_frame() is None
    reader.feed(b"c\x00\x00\x00\x01z")
    assert reader.next_frame() == b"abc"
    assert reader.next_frame() == b"z"
    reader.feed(b"\x00\x00\x01\x00")
    with pytest.raises(MalformedRequestError):
        reader.next_frame()


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 100, wire.READ_BUFFER - 4, 3 * wire.READ_BUFFER]),
                   min_size=1, max_size=6),
    reads=st.lists(st.integers(1, 2 * wire.READ_BUFFER), min_size=1, max_size=8),
)  # fmt: skip
def test_frame_reader_takes_reads_into_its_own_buffer(sizes: list[int], reads: list[int]) -> None:
    """Frames of any size split over reads of any size (the transport writing into
    ``get_buffer``) come out whole and in order; the buffer grows for a large frame."""
    frames = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    reader = wire.FrameReader(max_frame=4 * wire.READ_BUFFER)
    got, at, turn = [], 0, 0
    while at < len(stream):
        buffer = reader.get_buffer(-1)
        assert len(buffer) >= wire.READ_BUFFER
        n = min(reads[turn % len(reads)], len(buffer), len(stream) - at)
        buffer[:n] = stream[at : at + n]
        del buffer  # as the transport drops its view
        reader.buffer_updated(n)
        at, turn = at + n, turn + 1
        while (frame := reader.next_frame()) is not None:
            got.append(frame)
    assert got == frames


@settings(max_examples=40, deadline=None)
@given(
    recs=st.lists(
        st.builds(
            Record,
            key=maybe_bytes,
            value=maybe_bytes,
            timestamp=st.integers(TS, TS + 1000),
            headers=st.lists(
                st.tuples(st.text(max_size=5), st.text(max_size=5).map(str.encode)), max_size=2
            ).map(tuple),
        ),
        min_size=1,
        max_size=8,
    ),
    codec=st.sampled_from(CODECS),
)
def test_kafka_entry_survives_a_trip_through_pulsar_form(recs: list[Record], codec: int) -> None:
    batch = records.encode(recs, codec=codec)
    kafka_entry = Entry(100, len(recs), TS, TS, formats.KAFKA, batch)
    pulsar_entry = Entry(
        100, len(recs), TS, TS, formats.PULSAR, conversion.kafka_to_pulsar(kafka_entry)
    )
    back = records.decode(conversion.to_kafka_batch(pulsar_entry))
    assert records.read_header(conversion.to_kafka_batch(pulsar_entry)).base_offset == 100
    assert [(r.key, r.value, r.timestamp, r.headers) for r in back] == [
        (r.key, r.value, r.timestamp, r.headers) for r in recs
    ]


def test_broken_kafka_entry_still_converts_to_the_right_count() -> None:
    entry = Entry(0, 3, TS, TS, formats.KAFKA, b"\x00" * 70)
    pulsar = Entry(0, 3, TS, TS, formats.PULSAR, conversion.kafka_to_pulsar(entry))
    got = records.decode(conversion.to_kafka_batch(pulsar))
    assert len(got) == 3 and all(r.headers[0][0] == conversion.CONVERSION_ERROR for r in got)


def test_kafka_entry_format_reads_key_and_sequence() -> None:
    batch = records.encode(
        [Record(b"first", b"v", TS), Record(b"second", b"v", TS)],
        producer_id=5,
        producer_epoch=2,
        base_sequence=10,
    )
    fmt = KafkaEntryFormat()
    assert fmt.key(batch) == b"first"
    assert fmt.sequence(batch) == formats.Sequence("kafka-5-2", 10, 11)
    assert fmt.sequence(records.encode([Record(None, b"v", TS)])) is None


def test_empty_batches_are_refused() -> None:
    with pytest.raises(InvalidRecordError):
        records.encode([])


def test_a_compacted_batch_keeps_its_offsets_with_gaps() -> None:
    from magnetar.broker.compaction import CompactedRecord
    from magnetar.protocols.kafka.compacted import batch_of

    recs = [Record(b"k%d" % i, b"v%d" % i, 1000 + i) for i in range(4)]
    stored = records.encode(recs, producer_id=7, producer_epoch=0, base_sequence=0)
    entry = Entry(40, 4, 1000, 1003, formats.KAFKA, stored)
    batch = batch_of(CompactedRecord(entry, dropped=[0, 2]))
    assert batch is not None
    header = records.read_header(batch)  # validate() refuses gaps: producers send none
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (40, 3, 2)
    assert [(r.offset_delta, r.key) for r in records.decode(batch)] == [(1, b"k1"), (3, b"k3")]
    assert batch_of(CompactedRecord(entry, dropped=[0, 1, 2, 3])) is None
    assert batch_of(CompactedRecord(entry, dropped=[])) == records.with_base_offset(stored, 40)


def test_kafka_compaction_keys_and_markers() -> None:
    fmt = KafkaEntryFormat()
    batch = records.encode([Record(b"k", b"v", 1), Record(b"\xff", None, 1)])
    assert fmt.compaction_keys(batch) == [(b"k", False), (b"/w==", True)]  # base64 if not UTF-8
    assert fmt.transaction(batch) is None
    from magnetar.protocols.kafka.entry_format import marker_batch

    marker = marker_batch(5, 1, True, 1)
    assert fmt.compaction_keys(marker) == [(None, False)]
    mark = fmt.transaction(marker)
    assert mark is not None and (mark.producer_id, mark.control, mark.commit) == (5, True, True)
    rebuilt = fmt.pack(fmt.unpack(marker), 1)  # offloaded and read back: a marker again
    assert records.read_header(rebuilt).control and fmt.transaction(rebuilt) == mark
