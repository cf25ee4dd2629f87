"""How the broker reads facts out of entries written by Kafka producers (format KAFKA).

A KAFKA entry is one magic-2 record batch exactly as the producer sent it (compressed or
not, base offset as sent); the stored entry's own base offset is the truth. The producer id,
epoch and sequence numbers sit in the batch header, so deduplication state can be rebuilt
from the entries after a restart.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence

from magnetar.broker import formats
from magnetar.core.formats import KAFKA_CONTROL, MessageRow
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.errors import KafkaProtocolError

# A control batch's row (offload, Spark) carries the property KAFKA_CONTROL (COMMIT or
# ABORT), so a batch rebuilt from it is a marker again; a transactional batch's rows carry a
# producer name ending in this, so a batch rebuilt from them is transactional again
# (read_committed clients drop an aborted transaction's batches by that flag)
TXN_SUFFIX = "txn"


def sequence_name(producer_id: int, epoch: int) -> str:
    """The dedup identity of a Kafka idempotent producer session."""
    return f"kafka-{producer_id}-{epoch}"


def _producer_of(name: str) -> tuple[int, int, bool]:
    """``kafka-<id>-<epoch>[-txn]`` → (id, epoch, transactional); (-1, -1, False) for
    anything else."""
    parts = name.split("-")
    txn = len(parts) == 4 and parts[3] == TXN_SUFFIX
    named = len(parts) == 3 or txn
    if named and parts[0] == "kafka" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2]), txn
    return -1, -1, False


class KafkaEntryFormat:
    def key(self, payload: bytes) -> bytes | None:
        try:
            first = records.decode(payload)[:1]
        except KafkaProtocolError:
            return None
        return first[0].key if first else None

    def sequence(self, payload: bytes) -> formats.Sequence | None:
        try:
            header = records.read_header(payload)
        except KafkaProtocolError:
            return None
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        return formats.Sequence(
            sequence_name(header.producer_id, header.producer_epoch),
            header.base_sequence,
            header.last_sequence,
        )

    def transaction(self, payload: bytes) -> formats.TransactionMark | None:
        """The transaction of a transactional batch or a marker; None for any other."""
        try:
            header = records.read_header(payload)
        except KafkaProtocolError:
            return None
        if not header.transactional and not header.control:
            return None
        commit = header.control and control_type(payload) == "COMMIT"
        return formats.TransactionMark(header.producer_id, header.control, commit)

    def compaction_keys(self, payload: bytes) -> list[tuple[bytes | None, bool]]:
        """(key, null value?) of each record, keys as a Pulsar reader sees them (UTF-8, or
        base64 text when not UTF-8), so both protocols compact the same key alike. A marker
        has no key: compaction leaves it out."""
        batch = records.decode(payload)
        if records.read_header(payload).control:
            return [(None, False)] * len(batch)
        return [(_key_text(r.key), r.value is None) for r in batch]

    def unpack(self, payload: bytes) -> list[MessageRow]:
        """The batch's records as message rows (offload). Keys and header values become
        UTF-8 text (undecodable bytes replaced) and a null value an empty one; a marker's
        row carries the property :data:`KAFKA_CONTROL`."""
        header = records.read_header(payload)
        name = sequence_name(header.producer_id, header.producer_epoch)
        if header.transactional and not header.control:
            name += f"-{TXN_SUFFIX}"
        batch = records.decode(payload)
        extra = {KAFKA_CONTROL: control_type(payload)} if header.control else {}
        return [
            MessageRow(
                value=r.value or b"",
                key=r.key.decode("utf-8", "replace") if r.key is not None else None,
                properties={k: (v or b"").decode("utf-8", "replace") for k, v in r.headers} | extra,
                event_time=r.timestamp,
                producer_name=name if header.producer_id >= 0 else "",
                sequence_id=header.base_sequence + i if header.base_sequence >= 0 else -1,
                batch_size=len(batch),
            )
            for i, r in enumerate(batch)
        ]

    def pack(self, rows: Sequence[MessageRow], publish_time: int) -> bytes:
        """An uncompressed batch with the same records, producer and sequence numbers (a
        marker again for a marker's row)."""
        producer_id, epoch, txn = _producer_of(rows[0].producer_name)
        kind = rows[0].properties.get(KAFKA_CONTROL)
        if kind is not None:
            return marker_batch(producer_id, epoch, kind == "COMMIT", publish_time)
        batch = [
            records.Record(
                key=row.key.encode() if row.key is not None else None,
                value=row.value,
                timestamp=row.event_time if row.event_time >= 0 else publish_time,
                headers=tuple((k, v.encode()) for k, v in row.properties.items()),
            )
            for row in rows
        ]
        return records.encode(
            batch,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=rows[0].sequence_id if producer_id >= 0 else -1,
            attributes=records.TRANSACTIONAL if txn else 0,
        )


def control_type(payload: bytes) -> str:
    """COMMIT or ABORT: what a control batch marks (its record key: version, type 1 or 0).
    An unreadable one counts as ABORT (nothing of its transaction is shown)."""
    try:
        found = records.decode(payload)[:1]
    except (KafkaProtocolError, ValueError):
        return "ABORT"
    key = found[0].key if found else None
    commit = key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == 1
    return "COMMIT" if commit else "ABORT"


def marker_batch(producer_id: int, epoch: int, commit: bool, timestamp: int) -> bytes:
    """A COMMIT or ABORT control batch of ``producer_id`` (what the coordinator writes)."""
    key, value = struct.pack(">hh", 0, int(commit)), struct.pack(">hi", 0, 0)
    control = records.Record(key, value, timestamp)
    return records.encode(
        [control],
        producer_id=producer_id,
        producer_epoch=epoch,
        attributes=records.TRANSACTIONAL | records.CONTROL,
    )


def _key_text(key: bytes | None) -> bytes | None:
    if key is None:
        return None
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(key)
    return key
