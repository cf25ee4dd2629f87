"""Kafka record batches (magic 2): decode, encode, validate. Pure code, bytes in and out.

Layout of a batch (61-byte header, then the records, compressed as a whole when the
attributes say so)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records

``batchLength`` counts the bytes after itself; the CRC-32C covers ``attributes`` to the end,
so ``baseOffset`` (and the leader epoch) can be rewritten without recomputing it. A record is
``length varint | attributes i8 | timestampDelta varlong | offsetDelta varint | key | value |
headers``, keys and values ``varint length`` (−1 = null) then bytes, headers a varint count
of ``key string | value bytes``. Varints are zigzag-encoded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from magnetar.core.values import value_class
from magnetar.protocols.kafka import compression
from magnetar.protocols.kafka.errors import CorruptRecordError, InvalidRecordError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: what precedes the counted bytes
CRC_START = 21
# Room a record batch needs beyond the largest message it may carry: its header, a record's
# framing, key and headers (Pulsar pads its frame limit by the same 10 KiB for metadata), so
# a message of max_message_size bytes fits, as Kafka clients and Pulsar users expect.
BATCH_PADDING = 10 * 1024
_OFFSET = struct.Struct(">q")
_TIMESTAMP_LOG_APPEND = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
TRANSACTIONAL, CONTROL = _TRANSACTIONAL, _CONTROL  # attribute bits (transactions, KIP-98)

Header = tuple[str, bytes | None]


@value_class()
class Record:
    """One record; ``timestamp`` is absolute (ms since the epoch)."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[Header, ...] = ()
    offset_delta: int = 0


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    length: int  # batchLength: bytes after the length field
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return LOG_OVERHEAD + self.length

    @property
    def compression(self) -> int:
        return self.attributes & 0x07

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & _TIMESTAMP_LOG_APPEND)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset_delta if self.base_sequence >= 0 else -1


def read_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``data[pos:]``. Raises CorruptRecordError if it is cut."""
    if len(data) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"record batch header cut short ({len(data) - pos} bytes)")
    return BatchHeader(*HEADER.unpack_from(data, pos))


def magic_of(data: bytes | memoryview, pos: int = 0) -> int:
    """The magic byte of the batch or message at ``data[pos:]`` (same place in v0, v1, v2)."""
    if len(data) - pos < 17:
        raise CorruptRecordError("record batch cut short before its magic byte")
    return data[pos + 16]


def split(data: bytes | memoryview) -> Iterator[memoryview]:
    """The batches of a records field, each as a view. Raises CorruptRecordError when one
    overruns the data (a partial trailing batch is an error here: producers send whole ones)."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD:
            raise CorruptRecordError("record batch cut short before its length")
        (length,) = struct.unpack_from(">i", view, pos + 8)
        end = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > len(view):
            raise CorruptRecordError(f"record batch length {length} does not fit the data")
        yield view[pos:end]
        pos = end


def validate(batch: bytes | memoryview) -> BatchHeader:
    """Check a v2 batch as a producer sent it: size, magic, CRC-32C, record counts.

    Raises CorruptRecordError (bad CRC, bad size) or InvalidRecordError (rules broken).
    The records themselves are not decompressed (DESIGN.md decision 2).
    """
    header = read_header(batch)
    if header.size != len(batch):
        raise CorruptRecordError(f"record batch says {header.size} bytes, holds {len(batch)}")
    if header.magic != 2:
        raise InvalidRecordError(f"record batch magic {header.magic} where 2 was expected")
    if crc32c.crc32c(batch[CRC_START:]) != header.crc:
        raise CorruptRecordError("record batch CRC-32C mismatch: corrupted in transit")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"record batch holds {header.record_count} records with last offset delta "
            f"{header.last_offset_delta}; a producer batch numbers them 0..n-1"
        )
    if header.control:
        raise InvalidRecordError("control batches are written by the transaction coordinator")
    if header.transactional and header.producer_id < 0:
        raise InvalidRecordError("a transactional batch needs a producer id (InitProducerId)")
    if header.compression not in compression.NAMES:
        raise CorruptRecordError(f"unknown compression codec {header.compression}")
    return header


def with_base_offset(batch: bytes | memoryview, base_offset: int) -> bytes:
    """The batch renumbered from ``base_offset`` (the CRC does not cover it)."""
    return _OFFSET.pack(base_offset) + bytes(batch[8:])


def decode(batch: bytes | memoryview, *, max_size: int | None = None) -> list[Record]:
    """Every record of a v2 batch, decompressed to at most ``max_size`` bytes (default: the
    server's max message size). Raises CorruptRecordError."""
    header = read_header(batch)
    if header.magic != 2 or not HEADER_SIZE <= header.size <= len(batch):
        raise CorruptRecordError(f"not a magic-2 batch of {header.size} bytes")
    body = compression.decompress(
        header.compression, batch[HEADER_SIZE : header.size], max_size=max_size
    )
    records = _Reader(body).records(header)
    if len(records) != header.record_count:
        raise CorruptRecordError(
            f"record batch announces {header.record_count} records, holds {len(records)}"
        )
    return records


def encode(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    codec: int = compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
    attributes: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """A v2 batch of ``records`` (offset deltas 0..n-1, in order); ``attributes`` adds flag
    bits (TRANSACTIONAL, CONTROL) to the codec's. With ``last_offset_delta`` the records keep
    their own ``offset_delta`` (increasing, at most it): a compacted batch, with gaps, whose
    offsets are those of the batch it came from, as Kafka's log cleaner writes them."""
    if not records:
        raise InvalidRecordError("a record batch needs at least one record")
    base_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    deltas = range(len(records)) if last_offset_delta is None else [r.offset_delta for r in records]
    body = b"".join(_encode_record(d, r, base_ts) for d, r in zip(deltas, records, strict=True))
    body = compression.compress(codec, body)
    n = len(records)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            codec | attributes,
            n - 1 if last_offset_delta is None else last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
        + body
    )
    crc = crc32c.crc32c(after_crc)
    length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, 2, crc) + after_crc


# -- varints ---------------------------------------------------------------------------


def zigzag(value: int) -> bytes:
    """``value`` as a zigzag varint (Kafka's varint and varlong share the encoding)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_record(delta: int, r: Record, base_ts: int) -> bytes:
    parts = [b"\x00", zigzag(r.timestamp - base_ts), zigzag(delta), _nullable(r.key)]
    parts.append(_nullable(r.value))
    parts.append(zigzag(len(r.headers)))
    for key, value in r.headers:
        raw = key.encode()
        parts += (zigzag(len(raw)), raw, _nullable(value))
    body = b"".join(parts)
    return zigzag(len(body)) + body


def _nullable(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


class _Reader:
    """Sequential varint reader over a decompressed records body."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        data, pos, shift, n = self.data, self.pos, 0, 0
        while True:
            if pos >= len(data) or shift > 63:
                raise CorruptRecordError("record varint cut short or too long")
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        self.pos = pos
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError("record field overruns its batch")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def nullable(self) -> bytes | None:
        n = self.varint()
        return None if n < 0 else self.take(n)

    def records(self, header: BatchHeader) -> list[Record]:
        out = []
        while self.pos < len(self.data):
            out.append(self.record(header))
        return out

    def record(self, header: BatchHeader) -> Record:
        length = self.varint()
        end = self.pos + length
        if length < 0 or end > len(self.data):
            raise CorruptRecordError("record overruns its batch")
        self.pos += 1  # attributes: unused
        ts_delta, offset_delta = self.varint(), self.varint()
        key, value = self.nullable(), self.nullable()
        headers = []
        for _ in range(self.varint()):
            raw = self.nullable()
            if raw is None:
                raise CorruptRecordError("record header with a null key")
            headers.append((raw.decode("utf-8", "replace"), self.nullable()))
        if self.pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = header.max_timestamp if header.log_append_time else header.base_timestamp + ts_delta
        return Record(key, value, ts, tuple(headers), offset_delta)
