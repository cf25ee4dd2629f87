"""How the broker reads facts out of entries written by Pulsar producers (format PULSAR).

A stored entry is ``[u32 metadata size][MessageMetadata][payload]`` exactly as the producer
sent it. Dispatch keys and sequence ids come from the metadata alone; only ``unpack`` (rows)
and ``unpack_columns`` (columns, for offload and bulk reads) decompress and split the payload.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from magnetar.core import formats
from magnetar.core.formats import MessageArrays, MessageColumns, MessageRow
from magnetar.protocols.pulsar import compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import (
    BatchedMessage,
    build_batch,
    is_batch,
    single_metadata_of,
    unpack,
)
from magnetar.protocols.pulsar.batch_arrays import MAP, SplitBatches, split_batches
from magnetar.protocols.pulsar.batch_columns import build_columns, fields_of, split_columns
from magnetar.protocols.pulsar.compression import decompress_payload
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

    def deliver_at(self, payload: bytes) -> int | None:
        metadata = metadata_of(payload)
        return metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None

    def compaction_keys(self, payload: bytes) -> list[tuple[bytes | None, bool]]:
        """(partition key or None, null value?) of each message, as compaction sees them."""
        metadata = metadata_of(payload)
        if not is_batch(metadata):
            key = metadata.partition_key.encode() if metadata.HasField("partition_key") else None
            return [(key, metadata.null_value)]
        (size,) = _U32.unpack_from(payload, 0)
        return [
            (
                m.metadata.partition_key.encode() if m.metadata.HasField("partition_key") else None,
                m.metadata.null_value,
            )
            for m in unpack(metadata, payload[4 + size :])
        ]

    def unpack(self, payload: bytes) -> list[MessageRow]:
        """The messages, through protobuf objects. :meth:`unpack_columns` gives the same
        fields faster; this stays the reference its tests compare against."""
        metadata = metadata_of(payload)
        (size,) = _U32.unpack_from(payload, 0)
        batch = metadata.num_messages_in_batch if is_batch(metadata) else -1
        version = _schema_version(metadata)
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

    def unpack_columns(self, payload: bytes) -> MessageColumns:
        metadata = metadata_of(payload)
        (size,) = _U32.unpack_from(payload, 0)
        data = decompress_payload(metadata, payload[4 + size :])
        if not is_batch(metadata):
            return _single_columns(metadata, data)
        batch = split_columns(data, metadata.num_messages_in_batch, metadata.sequence_id)
        return MessageColumns(
            values=batch.values,
            keys=batch.keys,
            properties=batch.properties,
            event_times=batch.event_times,
            sequence_ids=batch.sequence_ids,
            producer_name=metadata.producer_name or None,
            schema_version=_schema_version(metadata),
            batch_size=metadata.num_messages_in_batch,
        )

    def unpack_arrays(self, payloads: Sequence[bytes]) -> MessageArrays:
        """The entries' messages as arrays: their batches split together where
        :func:`split_batches` can, the others one by one through :meth:`unpack_columns`.
        Raises when a payload cannot be read (not necessarily the error ``unpack_columns``
        gives for the first such payload: read them one by one for that)."""
        metadatas = [metadata_of(payload) for payload in payloads]
        batched = [i for i, metadata in enumerate(metadatas) if is_batch(metadata)]
        split = split_batches(
            [_batch_data(metadatas[i], payloads[i]) for i in batched],
            [metadatas[i].num_messages_in_batch for i in batched],
            [metadatas[i].sequence_id for i in batched],
        )
        fast = {i for i, done in zip(batched, split.fast.tolist(), strict=True) if done}
        out = _ArraysBuilder(split)
        for i, (metadata, payload) in enumerate(zip(metadatas, payloads, strict=True)):
            if i in fast:
                out.add_split(metadata)
            else:
                out.add_columns(self.unpack_columns(payload))
        return out.build()

    def pack(self, rows: Sequence[MessageRow], publish_time: int) -> bytes:
        first = rows[0]
        metadata = _entry_metadata(
            first.producer_name, first.sequence_id, first.schema_version, publish_time
        )
        if first.batch_size < 0:
            _single_fields(metadata, first.key, first.event_time, first.properties)
            return pack_payload(metadata, first.value)
        metadata.num_messages_in_batch = len(rows)
        if first.key is not None:
            metadata.partition_key = first.key
        messages = [BatchedMessage(_single(row), row.value) for row in rows]
        return pack_payload(metadata, build_batch(messages))

    def pack_columns(self, messages: MessageColumns, publish_time: int) -> bytes:
        if not messages.values:
            return self.pack(messages.rows(), publish_time)  # fails as it does
        sequence_id, event_time = messages.sequence_ids[0], messages.event_times[0]
        metadata = _entry_metadata(
            messages.producer_name or "",
            -1 if sequence_id is None else sequence_id,
            messages.schema_version,
            publish_time,
        )
        key = messages.keys[0]
        if messages.batch_size < 0:
            event_ms = -1 if event_time is None else event_time
            _single_fields(metadata, key, event_ms, messages.properties[0])
            return pack_payload(metadata, messages.values[0])
        metadata.num_messages_in_batch = len(messages)
        if key is not None:
            metadata.partition_key = key
        try:
            data = build_columns(
                messages.values,
                messages.keys,
                messages.properties,
                messages.event_times,
                messages.sequence_ids,
            )
        except (ValueError, TypeError, AttributeError):
            return self.pack(messages.rows(), publish_time)  # protobuf encodes it, or refuses
        return pack_payload(metadata, data)


def _batch_data(metadata: pb.MessageMetadata, payload: bytes) -> bytes | memoryview:
    """The batch's payload, uncompressed (a view, not a copy, when it was not compressed)."""
    (size,) = _U32.unpack_from(payload, 0)
    data = memoryview(payload)[4 + size :]
    return data if metadata.compression == compression.NONE else decompress_payload(metadata, data)


class _ArraysBuilder:
    """Chunks of each column in entry order: runs of rows of a :class:`SplitBatches` (sliced,
    not copied) between runs of entries read one by one (lists, one array per run)."""

    TYPES = (pa.binary(), pa.string(), MAP, pa.int64(), pa.int64())

    def __init__(self, split: SplitBatches) -> None:
        self.split = split
        self.row = 0  # the next unused row of the split
        self.run_start = 0  # where the run of split rows not yet taken starts
        self.chunks: list[list[pa.Array]] = [[], [], [], [], []]
        self.pending: list[list[Any]] = [[], [], [], [], []]  # entries read one by one
        self.counts: list[int] = []
        self.producers: list[str | None] = []
        self.versions: list[int | None] = []
        self.batch_sizes: list[int] = []

    def add_split(self, metadata: pb.MessageMetadata) -> None:
        self._flush_pending()
        count = metadata.num_messages_in_batch
        self.row += count
        self._entry(count, metadata.producer_name or None, _schema_version(metadata), count)

    def add_columns(self, columns: MessageColumns) -> None:
        self._take_run()
        values, keys, properties, event_times, sequence_ids = self.pending
        values += columns.values
        keys += columns.keys
        properties += columns.properties
        event_times += columns.event_times
        sequence_ids += columns.sequence_ids
        self._entry(len(columns), columns.producer_name, columns.schema_version, columns.batch_size)

    def _entry(self, count: int, producer: str | None, version: int | None, batch: int) -> None:
        self.counts.append(count)
        self.producers.append(producer)
        self.versions.append(version)
        self.batch_sizes.append(batch)

    def _take_run(self) -> None:
        if self.row > self.run_start:
            split, start, length = self.split, self.run_start, self.row - self.run_start
            columns = (split.values, split.keys, split.properties)
            rest = (split.event_times, split.sequence_ids)
            for column, array in zip(self.chunks, (*columns, *rest), strict=True):
                column.append(array.slice(start, length))
            self.run_start = self.row

    def _flush_pending(self) -> None:
        if self.pending[0]:
            for column, items, data_type in zip(self.chunks, self.pending, self.TYPES, strict=True):
                column.append(pa.array(items, data_type))
            self.pending = [[], [], [], [], []]

    def build(self) -> MessageArrays:
        self._take_run()
        self._flush_pending()
        values, keys, properties, event_times, sequence_ids = (
            _concat(chunks, data_type)
            for chunks, data_type in zip(self.chunks, self.TYPES, strict=True)
        )
        return MessageArrays(
            self.counts,
            values,
            keys,
            properties,
            event_times,
            sequence_ids,
            self.producers,
            self.versions,
            self.batch_sizes,
        )


def _concat(chunks: list[pa.Array], data_type: pa.DataType) -> pa.Array:
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks) if chunks else pa.array([], data_type)


def _entry_metadata(
    producer_name: str, sequence_id: int, schema_version: int | None, publish_time: int
) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=max(sequence_id, 0),
        publish_time=max(publish_time, 0),
    )
    if schema_version is not None:
        metadata.schema_version = struct.pack(">q", schema_version)
    return metadata


def _schema_version(metadata: pb.MessageMetadata) -> int | None:
    if len(metadata.schema_version) == 8:
        version: int = struct.unpack(">q", metadata.schema_version)[0]
        return version
    return None


def _single_columns(metadata: pb.MessageMetadata, data: bytes) -> MessageColumns:
    """A non-batched message, read as ``unpack`` reads it (through its single metadata)."""
    _, key, properties, event_time, sequence_id = fields_of(single_metadata_of(metadata, len(data)))
    return MessageColumns(
        values=[data],
        keys=[key],
        properties=[properties],
        event_times=[event_time],
        sequence_ids=[metadata.sequence_id if sequence_id is None else sequence_id],
        producer_name=metadata.producer_name or None,
        schema_version=_schema_version(metadata),
    )


def _single_fields(
    metadata: pb.MessageMetadata, key: str | None, event_time: int, properties: dict[str, str]
) -> None:
    """A single message's own fields, which it keeps in the entry's metadata."""
    if key is not None:
        metadata.partition_key = key
    if event_time >= 0:
        metadata.event_time = event_time
    for k, v in properties.items():
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
