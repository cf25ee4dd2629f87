"""The old message-set formats (magic 0 and 1), read so old producers still work.

A message set is ``[offset i64][size i32][message]...``; a message is ``crc u32 (CRC-32 of
what follows) | magic i8 | attributes i8 | timestamp i64 (magic 1 only) | key | value``,
keys and values ``i32 length`` (−1 = null) then bytes. A compressed message is a wrapper
whose value is a whole inner message set, compressed. The handler converts what it reads into
a magic-2 batch before storing it, so readers only ever see magic 2.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from magnetar.protocols.kafka import compression
from magnetar.protocols.kafka.errors import CorruptRecordError, InvalidRecordError
from magnetar.protocols.kafka.records import Record

_ENTRY = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LOG_APPEND_TIME = 0x08
MAX_DEPTH = 1  # a wrapper may hold plain messages, never another wrapper


def decode(data: bytes | memoryview, *, depth: int = 0) -> tuple[list[Record], int]:
    """Every record of a v0/v1 message set and the codec it was compressed with.

    Raises CorruptRecordError on a bad CRC or a message that overruns the set.
    """
    view, pos, out, codec = memoryview(data), 0, [], compression.NONE
    while pos < len(view):
        if len(view) - pos < _ENTRY.size:
            raise CorruptRecordError("message set entry cut short")
        _offset, size = _ENTRY.unpack_from(view, pos)
        start, end = pos + _ENTRY.size, pos + _ENTRY.size + size
        if size < 14 or end > len(view):
            raise CorruptRecordError(f"message of {size} bytes does not fit the message set")
        records, inner_codec = _decode_message(view[start:end], depth)
        out += records
        codec = inner_codec or codec
        pos = end
    return out, codec


def _decode_message(msg: memoryview, depth: int) -> tuple[list[Record], int]:
    (crc,) = struct.unpack_from(">I", msg, 0)
    if zlib.crc32(msg[4:]) != crc:
        raise CorruptRecordError("message CRC-32 mismatch: corrupted in transit")
    magic, attributes = msg[4], msg[5]
    if magic not in (0, 1):
        raise InvalidRecordError(f"message magic {magic} inside a v0/v1 message set")
    pos, timestamp = 6, -1
    if magic == 1:
        (timestamp,) = _I64.unpack_from(msg, pos)
        pos += 8
    key, pos = _bytes(msg, pos)
    value, pos = _bytes(msg, pos)
    codec = attributes & 0x07
    if codec == compression.NONE:
        return [Record(key, value, timestamp)], compression.NONE
    if depth >= MAX_DEPTH or value is None:
        raise CorruptRecordError("nested or empty compressed message")
    inner, _ = decode(compression.decompress(codec, value), depth=depth + 1)
    if attributes & _LOG_APPEND_TIME:
        inner = [Record(r.key, r.value, timestamp) for r in inner]
    return inner, codec


def _bytes(msg: memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(msg):
        raise CorruptRecordError("message field cut short")
    (n,) = _I32.unpack_from(msg, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(msg):
        raise CorruptRecordError("message field overruns the message")
    return bytes(msg[pos : pos + n]), pos + n


def encode(records: Sequence[Record], *, magic: int = 1, codec: int = compression.NONE) -> bytes:
    """A v0/v1 message set of ``records`` (offsets 0..n-1); compressed in one wrapper."""
    inner = b"".join(
        _entry(i, _message(magic, 0, r.timestamp, r.key, r.value)) for i, r in enumerate(records)
    )
    if codec == compression.NONE:
        return inner
    ts = max((r.timestamp for r in records), default=-1)
    wrapper = _message(magic, codec, ts, None, compression.compress(codec, inner))
    return _entry(len(records) - 1, wrapper)


def _entry(offset: int, message: bytes) -> bytes:
    return _ENTRY.pack(offset, len(message)) + message


def _message(magic: int, attributes: int, ts: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytes([magic, attributes]) + (_I64.pack(ts) if magic == 1 else b"")
    for field in (key, value):
        body += _I32.pack(-1) if field is None else _I32.pack(len(field)) + field
    return struct.pack(">I", zlib.crc32(body)) + body
