"""How the broker reads facts out of entries written by Kafka producers (format KAFKA).

A KAFKA entry is one magic-2 record batch exactly as the producer sent it (compressed or
not, base offset as sent); the stored entry's own base offset is the truth. The producer id,
epoch and sequence numbers sit in the batch header, so deduplication state can be rebuilt
from the entries after a restart.
"""

from __future__ import annotations

from magnetar.broker import formats
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.errors import KafkaProtocolError


def sequence_name(producer_id: int, epoch: int) -> str:
    """The dedup identity of a Kafka idempotent producer session."""
    return f"kafka-{producer_id}-{epoch}"


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


formats.register(formats.KAFKA, KafkaEntryFormat())
