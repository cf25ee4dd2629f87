"""Batch payloads to and from columns, for the offloader and bulk (Arrow) reads.

:func:`~magnetar.protocols.pulsar.batch.split_batch` builds a protobuf SingleMessageMetadata
and a BatchedMessage per message, and reading fields back out of protobuf objects costs more
again: that was most of the time it took to turn stored entries into Arrow rows. Here a
hand-written reader of SingleMessageMetadata appends each message's fields straight to one
list per column (:func:`split_columns`), and a hand-written writer makes the batch back from
such lists (:func:`build_columns`).

Both fall back on protobuf for anything out of the ordinary, so results and errors are exactly
those of the protobuf path. The reader knows the fields of pulsar_api.proto's
SingleMessageMetadata with the wire types the clients write and skips fields it has never
heard of; anything else (a known field with another wire type, a group, a varint of more than
64 bits, text that is not UTF-8, a missing ``payload_size`` or KeyValue half, bytes that end
early) sends that one message through ``read_message``. The writer refuses values it does not
know how protobuf would encode, and its caller then packs the entry with protobuf.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import read_message
from magnetar.protocols.pulsar.errors import BatchFormatError

# SingleMessageMetadata tags (field number << 3 | wire type); tests check them against the .proto.
TAG_PROPERTIES = 0x0A  # 1, repeated KeyValue
TAG_PARTITION_KEY = 0x12  # 2, string
TAG_PAYLOAD_SIZE = 0x18  # 3, int32 (required)
TAG_COMPACTED_OUT = 0x20  # 4, bool
TAG_EVENT_TIME = 0x28  # 5, uint64
TAG_KEY_B64_ENCODED = 0x30  # 6, bool
TAG_ORDERING_KEY = 0x3A  # 7, bytes
TAG_SEQUENCE_ID = 0x40  # 8, uint64
TAG_NULL_VALUE = 0x48  # 9, bool
TAG_NULL_PARTITION_KEY = 0x50  # 10, bool
KNOWN_FIELDS = range(1, 11)
# KeyValue tags: key = 1 and value = 2, both required strings.
TAG_KV_KEY = 0x0A
TAG_KV_VALUE = 0x12

_FLAGS = frozenset({TAG_COMPACTED_OUT, TAG_KEY_B64_ENCODED, TAG_NULL_VALUE, TAG_NULL_PARTITION_KEY})
_U32 = struct.Struct(">I")
_INT32_MAX = 0x7FFFFFFF
_MAX_FIELD_NUMBER = (1 << 29) - 1

# payload_size, partition_key, properties, event_time, sequence_id (None: not set).
SingleFields = tuple[int, str | None, dict[str, str], int | None, int | None]


@dataclass(slots=True)
class BatchColumns:
    """The per-message fields of a batch, one list per field, one item per message (typed as
    :class:`~magnetar.core.formats.MessageColumns` has them; no sequence id is None here)."""

    values: list[bytes] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    properties: list[dict[str, str]] = field(default_factory=list)
    event_times: list[int | None] = field(default_factory=list)
    sequence_ids: list[int | None] = field(default_factory=list)


class _Unreadable(Exception):
    """The hand-written reader met something it leaves to protobuf."""


class _Unencodable(ValueError):
    """The hand-written writer met a number it leaves to protobuf (to encode or to refuse)."""


def split_columns(data: bytes, count: int, first_sequence_id: int) -> BatchColumns:
    """The messages of an uncompressed batch payload, as columns.

    Splits and fails exactly as ``split_batch(data, count)`` (BatchFormatError, same
    message). A message without a ``sequence_id`` gets ``first_sequence_id`` plus its index,
    as the clients number the messages of a batch.
    """
    out = BatchColumns()
    values, keys, properties = out.values, out.keys, out.properties
    event_times, sequence_ids = out.event_times, out.sequence_ids
    total, pos, n = len(data), 0, 0
    while pos < total and n < count:
        start = pos + 4
        stop = start + _U32.unpack_from(data, pos)[0] if start <= total else start
        if stop > total:  # the size is cut short, or the metadata overruns the batch
            read_message(memoryview(data), pos)  # raises the BatchFormatError split_batch does
        try:
            size, key, props, event_time, sequence_id = _read_single(data, start, stop)
        except (_Unreadable, IndexError, UnicodeDecodeError):
            size, key, props, event_time, sequence_id = fields_of(_parse(data, pos))
        end = stop + size
        if end > total:
            raise BatchFormatError(f"payload of {size} bytes overruns the batch")
        values.append(data[stop:end])
        keys.append(key)
        properties.append(props)
        event_times.append(event_time)
        sequence_ids.append(first_sequence_id + n if sequence_id is None else sequence_id)
        pos, n = end, n + 1
    if n != count:
        raise BatchFormatError(f"batch announces {count} messages, holds {n}")
    if pos != total:
        raise BatchFormatError(f"{total - pos} bytes left over after {n} messages")
    return out


def _read_single(buf: bytes, pos: int, end: int) -> SingleFields:
    """The fields of the SingleMessageMetadata in ``buf[pos:end]``.

    Raises _Unreadable, IndexError or UnicodeDecodeError for anything it leaves to protobuf.
    Tags are tested most frequent first.
    """
    size = -1
    key: str | None = None
    event_time: int | None = None
    sequence_id: int | None = None
    properties: dict[str, str] | None = None
    while pos < end:
        tag = buf[pos]
        if tag == TAG_PARTITION_KEY:
            start, pos = _delimited(buf, pos + 1, end)
            key = buf[start:pos].decode()
        elif tag == TAG_PAYLOAD_SIZE:
            size, pos = _varint(buf, pos + 1)
        elif tag == TAG_SEQUENCE_ID:
            sequence_id, pos = _varint(buf, pos + 1)
        elif tag == TAG_EVENT_TIME:
            event_time, pos = _varint(buf, pos + 1)
        elif tag == TAG_PROPERTIES:
            name, value, pos = _property(buf, pos + 1, end)
            if properties is None:
                properties = {}
            properties[name] = value  # a later value of a name wins, as in protobuf
        elif tag in _FLAGS:
            pos = _varint(buf, pos + 1)[1]
        elif tag == TAG_ORDERING_KEY:
            pos = _delimited(buf, pos + 1, end)[1]
        else:
            pos = _skip_unknown(buf, pos)
    if pos != end or not 0 <= size <= _INT32_MAX:
        raise _Unreadable
    return size, key, {} if properties is None else properties, event_time, sequence_id


def fields_of(metadata: pb.SingleMessageMetadata) -> SingleFields:
    """The same fields, read from a parsed SingleMessageMetadata (the protobuf path)."""
    return (
        metadata.payload_size,
        metadata.partition_key if metadata.HasField("partition_key") else None,
        {kv.key: kv.value for kv in metadata.properties},
        metadata.event_time if metadata.HasField("event_time") else None,
        metadata.sequence_id if metadata.HasField("sequence_id") else None,
    )


def _parse(data: bytes, pos: int) -> pb.SingleMessageMetadata:
    message, _ = read_message(memoryview(data), pos)
    return message.metadata


def _delimited(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Where the bytes of a length-delimited field whose length is at ``pos`` start and stop."""
    length = buf[pos]
    if length < 0x80:
        pos += 1
    else:
        length, pos = _varint(buf, pos)
    stop = pos + length
    if stop > end:
        raise _Unreadable
    return pos, stop


def _property(buf: bytes, pos: int, end: int) -> tuple[str, str, int]:
    """The name and value of the KeyValue whose length is at ``pos``, and where it stops."""
    # What every client writes, read without a loop: a length under 128, then the name (1)
    # and the value (2), each under 128 bytes.
    stop = pos + 1 + buf[pos]
    mid = pos + 3 + buf[pos + 2]  # the value's tag, if the name's length is one byte
    if (
        buf[pos] < 0x80
        and stop <= end
        and buf[pos + 1] == TAG_KV_KEY
        and buf[pos + 2] < 0x80
        and buf[mid] == TAG_KV_VALUE
        and buf[mid + 1] < 0x80
        and mid + 2 + buf[mid + 1] == stop
    ):
        return buf[pos + 3 : mid].decode(), buf[mid + 2 : stop].decode(), stop
    start, stop = _delimited(buf, pos, end)
    return (*_any_key_value(buf, start, stop), stop)


def _any_key_value(buf: bytes, pos: int, end: int) -> tuple[str, str]:
    name = value = None
    while pos < end:
        tag = buf[pos]
        start, pos = _delimited(buf, pos + 1, end)
        if tag == TAG_KV_KEY:
            name = buf[start:pos].decode()
        elif tag == TAG_KV_VALUE:
            value = buf[start:pos].decode()
        else:
            raise _Unreadable
    if name is None or value is None:
        raise _Unreadable  # a required field is missing: protobuf says how that fails
    return name, value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; at most 10 bytes and 64 bits.
    Up to three bytes (sequence ids, sizes) are read without a loop."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    byte = buf[pos + 1]
    if byte < 0x80:
        return value | byte << 7, pos + 2
    value |= (byte & 0x7F) << 7
    byte = buf[pos + 2]
    if byte < 0x80:
        return value | byte << 14, pos + 3
    value |= (byte & 0x7F) << 14
    pos, shift = pos + 3, 21
    while shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:
                raise _Unreadable
            return value, pos
        shift += 7
    raise _Unreadable


def _skip_unknown(buf: bytes, pos: int) -> int:
    """The position after a field of a number SingleMessageMetadata does not define."""
    tag, pos = _varint(buf, pos)
    number, wire_type = tag >> 3, tag & 7
    if number in KNOWN_FIELDS or not 0 < number <= _MAX_FIELD_NUMBER:
        raise _Unreadable  # a known field in an unusual encoding, or an invalid number
    if wire_type == 0:
        return _varint(buf, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        length, pos = _varint(buf, pos)
        return pos + length
    if wire_type == 5:
        return pos + 4
    raise _Unreadable  # groups (3, 4) and invalid wire types (6, 7)


# -- writing ------------------------------------------------------------------------------------


def build_columns(
    values: list[bytes],
    keys: list[str | None],
    properties: list[dict[str, str]],
    event_times: list[int | None],
    sequence_ids: list[int | None],
) -> bytes:
    """An uncompressed batch payload: byte for byte what ``build_batch`` makes of the same
    messages, each SingleMessageMetadata holding the fields given (None: not set, as are
    negative times and ids), with fields in number order as protobuf writes them.

    Raises ValueError, TypeError or AttributeError for values it does not write (numbers out
    of range, text that is not a str or not UTF-8, a value that is not bytes): let protobuf
    have those.
    """
    parts: list[bytes] = []
    for value, key, props, event_time, sequence_id in zip(
        values, keys, properties, event_times, sequence_ids, strict=True
    ):
        size = len(value)
        metadata = b"".join([_property_bytes(n, v) for n, v in props.items()]) if props else b""
        if key is not None:
            metadata += _text_bytes(TAG_PARTITION_KEY, key)
        metadata += _SIZE_TAG + (_ONE_BYTE[size] if size < 0x80 else _varint_bytes(size, 31))
        if event_time is not None and event_time >= 0:
            metadata += _EVENT_TIME_TAG + _varint_bytes(event_time, 64)
        if sequence_id is not None and sequence_id >= 0:
            metadata += _SEQUENCE_ID_TAG + _varint_bytes(sequence_id, 64)
        parts += (_U32.pack(len(metadata)), metadata, value)
    return b"".join(parts)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]
_PROPERTIES_TAG = _ONE_BYTE[TAG_PROPERTIES]
_SIZE_TAG = _ONE_BYTE[TAG_PAYLOAD_SIZE]
_EVENT_TIME_TAG = _ONE_BYTE[TAG_EVENT_TIME]
_SEQUENCE_ID_TAG = _ONE_BYTE[TAG_SEQUENCE_ID]


def _text_bytes(tag: int, text: str) -> bytes:
    data = text.encode()
    n = len(data)
    return _ONE_BYTE[tag] + (_ONE_BYTE[n] if n < 0x80 else _varint_bytes(n, 31)) + data


def _property_bytes(name: str, value: str) -> bytes:
    key_value = _text_bytes(TAG_KV_KEY, name) + _text_bytes(TAG_KV_VALUE, value)
    n = len(key_value)
    return _PROPERTIES_TAG + (_ONE_BYTE[n] if n < 0x80 else _varint_bytes(n, 31)) + key_value


def _varint_bytes(value: int, bits: int) -> bytes:
    """``value`` as a varint; it must fit in ``bits`` bits (31: a non-negative int32)."""
    if value < 0x80:
        if value < 0:
            raise _Unencodable(f"{value} is negative")
        return _ONE_BYTE[value]
    if value >> bits:
        raise _Unencodable(f"{value} does not fit in {bits} bits")
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
