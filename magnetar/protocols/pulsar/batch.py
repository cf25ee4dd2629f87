"""Batch payloads: several messages in one entry.

An uncompressed batch is ``num_messages_in_batch`` times
``[metadata_size u32][SingleMessageMetadata][payload of payload_size bytes]``; compression, when
used, covers the whole batch. A payload is a batch when its MessageMetadata *has*
``num_messages_in_batch`` set (even to 1), as the clients decide.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from magnetar.core.values import value_class
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.compression import decompress_payload
from magnetar.protocols.pulsar.errors import BatchFormatError
from magnetar.protocols.pulsar.frames import BytesLike

_U32 = struct.Struct(">I")

# MessageMetadata fields that a non-batched message keeps per message (batch: per single).
_PER_MESSAGE_FIELDS = (
    "partition_key",
    "partition_key_b64_encoded",
    "ordering_key",
    "event_time",
    "sequence_id",
    "null_value",
    "null_partition_key",
)


@value_class()
class BatchedMessage:
    """One message of a batch: its SingleMessageMetadata and its payload bytes."""

    metadata: pb.SingleMessageMetadata
    payload: bytes


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def split_batch(data: BytesLike, count: int | None = None) -> list[BatchedMessage]:
    """The messages of an uncompressed batch payload.

    ``count`` (``num_messages_in_batch``) is checked when given. Raises BatchFormatError
    when the bytes do not split into exactly that many messages with nothing left over.
    """
    view = memoryview(data)
    messages: list[BatchedMessage] = []
    offset = 0
    while offset < len(view) and (count is None or len(messages) < count):
        message, offset = read_message(view, offset)
        messages.append(message)
    if count is not None and len(messages) != count:
        raise BatchFormatError(f"batch announces {count} messages, holds {len(messages)}")
    if offset != len(view):
        left = len(view) - offset
        raise BatchFormatError(f"{left} bytes left over after {len(messages)} messages")
    return messages


def build_batch(messages: Iterable[BatchedMessage]) -> bytes:
    """An uncompressed batch payload; each ``payload_size`` is set from its payload."""
    parts: list[bytes] = []
    for message in messages:
        metadata = pb.SingleMessageMetadata()
        metadata.CopyFrom(message.metadata)
        metadata.payload_size = len(message.payload)
        raw = metadata.SerializeToString()
        parts += (_U32.pack(len(raw)), raw, message.payload)
    return b"".join(parts)


def unpack(metadata: pb.MessageMetadata, data: BytesLike) -> list[BatchedMessage]:
    """Every message of an entry, decompressed: a batch split, or the single message.

    A single message gets a SingleMessageMetadata built from its MessageMetadata, so readers
    treat both alike. Raises CompressionError or BatchFormatError.
    """
    payload = decompress_payload(metadata, data)
    if is_batch(metadata):
        return split_batch(payload, metadata.num_messages_in_batch)
    return [BatchedMessage(single_metadata_of(metadata, len(payload)), payload)]


def single_metadata_of(metadata: pb.MessageMetadata, size: int) -> pb.SingleMessageMetadata:
    """The SingleMessageMetadata equivalent of a non-batched message's MessageMetadata."""
    single = pb.SingleMessageMetadata(payload_size=size, properties=metadata.properties)
    for field in _PER_MESSAGE_FIELDS:
        if metadata.HasField(field):
            setattr(single, field, getattr(metadata, field))
    return single


def read_message(view: memoryview, offset: int) -> tuple[BatchedMessage, int]:
    """The message at ``offset`` of a batch and the offset after it. Raises BatchFormatError
    when its metadata or payload does not fit, or the metadata does not parse."""
    if offset + 4 > len(view):
        raise BatchFormatError(f"message metadata size cut short at byte {offset}")
    (size,) = _U32.unpack_from(view, offset)
    start = offset + 4
    if start + size > len(view):
        raise BatchFormatError(f"message metadata of {size} bytes overruns the batch")
    metadata = pb.SingleMessageMetadata()
    try:
        metadata.ParseFromString(view[start : start + size])
    except DecodeError as exc:
        raise BatchFormatError(f"message metadata at byte {offset} does not parse") from exc
    if not metadata.IsInitialized() or metadata.payload_size < 0:
        raise BatchFormatError(f"message metadata at byte {offset} lacks a valid payload_size")
    end = start + size + metadata.payload_size
    if end > len(view):
        raise BatchFormatError(f"payload of {metadata.payload_size} bytes overruns the batch")
    return BatchedMessage(metadata, bytes(view[start + size : end])), end
