"""How the broker reads facts out of entries written by Pulsar producers (format PULSAR).

A stored entry is ``[u32 metadata size][MessageMetadata][payload]`` exactly as the producer
sent it; only the metadata is parsed here, never the (possibly compressed) payload.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from magnetar.core import formats
from magnetar.core.formats import MessageRow
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch, is_batch, unpack
from magnetar.protocols.pulsar.frames import pack_payload

_U32 = struct.Struct(">I")


def metadata_of(raw: bytes) -> pb.MessageMetadata:
    (size,) = _U32.unpack_from(raw, 0)
    metadata = pb.MessageMetadata()
    metadata.ParseFromString(raw[4 : 4 + size])
    return metadata


def message_count(metadata: pb.MessageMetadata) -> int:
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


class PulsarEntryFormat:
    def key(self, payload: bytes) -> bytes | None:
        metadata = metadata_of(payload)
        if metadata.HasField("ordering_key"):
            return bytes(metadata.ordering_key)
        if metadata.HasField("partition_key"):
            return metadata.partition_key.encode()
        return None

    def sequence(self, payload: bytes) -> formats.Sequence | None:
        metadata = metadata_of(payload)
        last = metadata.sequence_id + message_count(metadata) - 1
        highest = max(metadata.highest_sequence_id, last)
        return formats.Sequence(metadata.producer_name, metadata.sequence_id, highest)

    def unpack(self, payload: bytes) -> list[MessageRow]:
        metadata = metadata_of(payload)
        (size,) = _U32.unpack_from(payload, 0)
        batch = metadata.num_messages_in_batch if is_batch(metadata) else -1
        version = None
        if len(metadata.schema_version) == 8:
            (version,) = struct.unpack(">q", metadata.schema_version)
        return [
            MessageRow(
                value=m.payload,
                key=m.metadata.partition_key if m.metadata.HasField("partition_key") else None,
                properties={kv.key: kv.value for kv in m.metadata.properties},
                event_time=m.metadata.event_time if m.metadata.HasField("event_time") else -1,
                producer_name=metadata.producer_name,
                sequence_id=(
                    m.metadata.sequence_id
                    if m.metadata.HasField("sequence_id")
                    else metadata.sequence_id + i
                ),
                schema_version=version,
                batch_size=batch,
            )
            for i, m in enumerate(unpack(metadata, payload[4 + size :]))
        ]

    def pack(self, rows: Sequence[MessageRow], publish_time: int) -> bytes:
        first = rows[0]
        metadata = pb.MessageMetadata(
            producer_name=first.producer_name,
            sequence_id=max(first.sequence_id, 0),
            publish_time=max(publish_time, 0),
        )
        if first.schema_version is not None:
            metadata.schema_version = struct.pack(">q", first.schema_version)
        if first.batch_size < 0:
            _single_fields(metadata, first)
            return pack_payload(metadata, first.value)
        metadata.num_messages_in_batch = len(rows)
        if first.key is not None:
            metadata.partition_key = first.key
        messages = [BatchedMessage(_single(row), row.value) for row in rows]
        return pack_payload(metadata, build_batch(messages))


def _single_fields(metadata: pb.MessageMetadata, row: MessageRow) -> None:
    if row.key is not None:
        metadata.partition_key = row.key
    if row.event_time >= 0:
        metadata.event_time = row.event_time
    for k, v in row.properties.items():
        metadata.properties.add(key=k, value=v)


def _single(row: MessageRow) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=len(row.value))
    if row.key is not None:
        single.partition_key = row.key
    if row.event_time >= 0:
        single.event_time = row.event_time
    if row.sequence_id >= 0:
        single.sequence_id = row.sequence_id
    for k, v in row.properties.items():
        single.properties.add(key=k, value=v)
    return single


formats.register(formats.PULSAR, PulsarEntryFormat())
