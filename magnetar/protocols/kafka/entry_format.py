"""How the broker reads facts out of entries written by Kafka producers (format KAFKA).

A KAFKA entry is one magic-2 record batch exactly as the producer sent it (compressed or
not, base offset as sent); the stored entry's own base offset is the truth. The producer id,
epoch and sequence numbers sit in the batch header, so deduplication state can be rebuilt
from the entries after a restart.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker import formats
from magnetar.core.formats import MessageRow
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.errors import KafkaProtocolError


def sequence_name(producer_id: int, epoch: int) -> str:
    """The dedup identity of a Kafka idempotent producer session."""
    return f"kafka-{producer_id}-{epoch}"


def _producer_of(name: str) -> tuple[int, int]:
    """``kafka-<id>-<epoch>`` → (id, epoch); (-1, -1) for anything else."""
    parts = name.split("-")
    if len(parts) == 3 and parts[0] == "kafka" and parts[1].isdigit() and parts[2].isdigit():
        return int(parts[1]), int(parts[2])
    return -1, -1


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

    def unpack(self, payload: bytes) -> list[MessageRow]:
        """The batch's records as message rows (offload). Keys and header values become
        UTF-8 text (undecodable bytes replaced) and a null value an empty one."""
        header = records.read_header(payload)
        name = sequence_name(header.producer_id, header.producer_epoch)
        batch = records.decode(payload)
        return [
            MessageRow(
                value=r.value or b"",
                key=r.key.decode("utf-8", "replace") if r.key is not None else None,
                properties={k: (v or b"").decode("utf-8", "replace") for k, v in r.headers},
                event_time=r.timestamp,
                producer_name=name if header.producer_id >= 0 else "",
                sequence_id=header.base_sequence + i if header.base_sequence >= 0 else -1,
                batch_size=len(batch),
            )
            for i, r in enumerate(batch)
        ]

    def pack(self, rows: Sequence[MessageRow], publish_time: int) -> bytes:
        """An uncompressed batch with the same records, producer and sequence numbers."""
        producer_id, epoch = _producer_of(rows[0].producer_name)
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
        )
