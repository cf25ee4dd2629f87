"""One store, two protocols: converting stored entries between Kafka and Pulsar form.

A KAFKA entry (a magic-2 record batch as the producer sent it, maybe compressed) becomes a
Pulsar batch for Pulsar consumers; a PULSAR entry (``[u32 size][MessageMetadata][payload]``,
maybe a compressed batch) becomes an uncompressed record batch for Kafka fetchers. The
mapping, both ways: key ↔ partition key (base64-flagged when the key is not UTF-8: Java's
``getKeyBytes()`` gives the bytes back, pulsar-client Python's ``partition_key()`` the base64
text; not also put in ``ordering_key``, whose Python accessor fails on bytes that are not
UTF-8; a Pulsar message with an ordering key and no partition key gets it as its Kafka key),
value ↔ payload (a null value ↔ ``null_value``), timestamp ↔
event time (publish time when a Pulsar message has none), headers ↔ properties without loss
(see ``properties``: binary values, nulls and repeated names survive). The number of messages
is kept, so Kafka offsets and Pulsar batch indexes name the same messages. Pure code.
"""

from __future__ import annotations

import base64
import binascii
import logging
import struct

from magnetar.broker import formats
from magnetar.core.entries import Entry
from magnetar.core.formats import KAFKA_CONTROL
from magnetar.protocols.kafka import properties, records
from magnetar.protocols.kafka.errors import CorruptRecordError, KafkaProtocolError
from magnetar.protocols.kafka.records import Record
from magnetar.protocols.pulsar import batch as pulsar_batch
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.entry_format import metadata_of
from magnetar.protocols.pulsar.errors import ProtocolError

log = logging.getLogger(__name__)
_U32 = struct.Struct(">I")
CONVERSION_ERROR = "magnetar.conversion.error"
# A Kafka transaction marker, were a Pulsar reader to get one (dispatch hides them), is an
# empty message with the property KAFKA_CONTROL (COMMIT or ABORT).


def producer_name(producer_id: int) -> str:
    """The Pulsar producer name Kafka producer ``producer_id`` appears under."""
    return f"kafka-{producer_id}" if producer_id >= 0 else "kafka"


# -- Kafka → Pulsar --------------------------------------------------------------------


def kafka_to_pulsar(entry: Entry) -> bytes:
    """The Pulsar form (``[u32 size][MessageMetadata][batch]``) of a KAFKA entry.

    Never raises: an entry whose records do not decode (it was stored with a valid CRC but
    broken records) becomes ``count`` empty messages flagged with ``CONVERSION_ERROR``, so
    Pulsar message ids still line up with offsets.
    """
    try:
        header = records.read_header(entry.payload)
        if header.control:
            return _marker(entry, records.decode(entry.payload))
        recs = records.decode(entry.payload)
        if len(recs) != entry.count:
            raise CorruptRecordError(f"{len(recs)} records where the entry holds {entry.count}")
    except KafkaProtocolError as exc:
        log.warning("KAFKA entry at offset %d does not decode: %s", entry.base_offset, exc)
        return _broken(entry, str(exc))
    singles = [pulsar_batch.BatchedMessage(_single(r), r.value or b"") for r in recs]
    metadata = pb.MessageMetadata(
        producer_name=producer_name(header.producer_id),
        sequence_id=max(header.base_sequence, 0),
        publish_time=max(entry.publish_time, 0),
        num_messages_in_batch=len(singles),
    )
    return _frame(metadata, pulsar_batch.build_batch(singles))


def _single(r: Record) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=0)
    if r.key is not None:
        try:
            single.partition_key = r.key.decode("utf-8")
        except UnicodeDecodeError:
            single.partition_key = base64.b64encode(r.key).decode()
            single.partition_key_b64_encoded = True
    if r.value is None:
        single.null_value = True
    if r.timestamp >= 0:
        single.event_time = r.timestamp
    for key, value in properties.to_properties(r.headers):
        single.properties.add(key=key, value=value)
    return single


def _marker(entry: Entry, control: list[Record]) -> bytes:
    key = control[0].key if control else None
    kind = "COMMIT" if key and len(key) >= 4 and key[2:4] == b"\x00\x01" else "ABORT"
    single = pb.SingleMessageMetadata(payload_size=0)
    single.properties.add(key=KAFKA_CONTROL, value=kind)
    metadata = pb.MessageMetadata(
        producer_name="kafka-transaction",
        sequence_id=0,
        publish_time=max(entry.publish_time, 0),
        num_messages_in_batch=1,
    )
    return _frame(metadata, pulsar_batch.build_batch([pulsar_batch.BatchedMessage(single, b"")]))


def _broken(entry: Entry, problem: str) -> bytes:
    single = pb.SingleMessageMetadata(payload_size=0)
    single.properties.add(key=CONVERSION_ERROR, value=problem)
    singles = [pulsar_batch.BatchedMessage(single, b"")] * entry.count
    metadata = pb.MessageMetadata(
        producer_name="kafka",
        sequence_id=0,
        publish_time=max(entry.publish_time, 0),
        num_messages_in_batch=entry.count,
    )
    return _frame(metadata, pulsar_batch.build_batch(singles))


def _frame(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    raw = metadata.SerializeToString()
    return _U32.pack(len(raw)) + raw + payload


# -- Pulsar → Kafka --------------------------------------------------------------------


def pulsar_to_kafka(entry: Entry) -> bytes:
    """A PULSAR entry as an uncompressed record batch numbered from its base offset.

    Raises KafkaProtocolError (CORRUPT_MESSAGE) when the stored entry does not decode.
    """
    try:
        metadata = metadata_of(entry.payload)
        (size,) = _U32.unpack_from(entry.payload, 0)
        messages = pulsar_batch.unpack(metadata, memoryview(entry.payload)[4 + size :])
    except (ProtocolError, struct.error, ValueError) as exc:
        raise CorruptRecordError(
            f"stored Pulsar entry at offset {entry.base_offset} does not decode: {exc}"
        ) from exc
    fallback_ts = metadata.publish_time or entry.publish_time
    recs = [_record(m, fallback_ts) for m in messages]
    return records.encode(recs, base_offset=entry.base_offset)


def _record(message: pulsar_batch.BatchedMessage, fallback_ts: int) -> Record:
    single = message.metadata
    key: bytes | None = None
    if single.HasField("partition_key") and not single.null_partition_key:
        key = single.partition_key.encode()
        if single.partition_key_b64_encoded:
            key = _b64(single.partition_key, key)
    elif single.HasField("ordering_key"):
        key = single.ordering_key
    value = None if single.null_value else message.payload
    timestamp = single.event_time if single.event_time > 0 else fallback_ts
    headers = properties.to_headers((p.key, p.value) for p in single.properties)
    return Record(key, value, timestamp, headers)


def _b64(text: str, fallback: bytes) -> bytes:
    """A base64 key decoded; a key flagged base64 that is not stays as its text."""
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        return fallback


def to_kafka_batch(entry: Entry) -> bytes:
    """Any stored entry as a record batch numbered from its base offset."""
    if entry.format == formats.KAFKA:
        return records.with_base_offset(entry.payload, entry.base_offset)
    if entry.format == formats.PULSAR:
        return pulsar_to_kafka(entry)
    recs = [Record(None, entry.payload, entry.publish_time)] * entry.count
    return records.encode(recs, base_offset=entry.base_offset)
