"""Entry formats: how the broker learns keys and sequence ids from stored entries.

An entry is a producer's batch as received (DESIGN.md decision 2); its ``format`` byte says
which protocol wrote it. The broker never parses wire formats itself: each protocol handler
registers an :class:`EntryFormat` for the formats it writes, and the broker asks it for the
few facts it needs (the dispatch key, the producer's sequence ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

RAW = 0  # opaque bytes written by Magnetar itself
PULSAR = 1  # [u32 metadata size][MessageMetadata][payload] as a Pulsar producer sent it
KAFKA = 2  # a Kafka record batch


@dataclass(frozen=True, slots=True)
class Sequence:
    producer_name: str
    sequence_id: int
    highest_sequence_id: int


class EntryFormat(Protocol):
    def key(self, payload: bytes) -> bytes | None:
        """The key that Key_Shared dispatch hashes (the first message's), or None."""
        ...

    def sequence(self, payload: bytes) -> Sequence | None:
        """The producer name and sequence ids carried by the entry, if any."""
        ...


_FORMATS: dict[int, EntryFormat] = {}


def register(fmt: int, codec: EntryFormat) -> None:
    _FORMATS[fmt] = codec


def key_of(fmt: int, payload: bytes) -> bytes | None:
    codec = _FORMATS.get(fmt)
    return codec.key(payload) if codec else None


def sequence_of(fmt: int, payload: bytes) -> Sequence | None:
    codec = _FORMATS.get(fmt)
    return codec.sequence(payload) if codec else None
