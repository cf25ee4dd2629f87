"""Entry formats: how layers that know no wire protocol learn what an entry holds.

An entry is a producer's batch as received (DESIGN.md decision 2); its ``format`` byte says
which protocol wrote it. Protocol handlers register an :class:`EntryFormat` for the formats
they write; the broker asks it for dispatch keys and sequence ids, the offloader for the
individual messages (one Parquet row each), and readers of offloaded data to rebuild an
equivalent entry from those rows.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Protocol

RAW = 0  # opaque bytes written by Magnetar itself: one message per entry
PULSAR = 1  # [u32 metadata size][MessageMetadata][payload] as a Pulsar producer sent it
KAFKA = 2  # a Kafka record batch


@dataclass(frozen=True, slots=True)
class Sequence:
    producer_name: str
    sequence_id: int
    highest_sequence_id: int


@dataclass(slots=True)
class MessageRow:
    """One message of an entry, as offloaded Parquet stores it.

    ``batch_size`` is -1 for an entry that is not a batch, N for each message of a batch of N.
    """

    value: bytes
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int = -1
    producer_name: str = ""
    sequence_id: int = -1
    schema_version: int | None = None
    batch_size: int = -1


class EntryFormat(Protocol):
    def key(self, payload: bytes) -> bytes | None:
        """The key that Key_Shared dispatch hashes (the first message's), or None."""
        ...

    def sequence(self, payload: bytes) -> Sequence | None:
        """The producer name and sequence ids carried by the entry, if any."""
        ...


class UnpackingFormat(EntryFormat, Protocol):
    def unpack(self, payload: bytes) -> list[MessageRow]:
        """The entry's messages, decompressed, in order."""
        ...

    def pack(self, rows: Seq[MessageRow], publish_time: int) -> bytes:
        """An entry equivalent to the one ``rows`` came from (same messages, same order)."""
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


class UnknownFormatError(ValueError):
    """No registered format can unpack or rebuild entries of this format."""


def unpack(fmt: int, payload: bytes) -> list[MessageRow]:
    """The messages of an entry. Raises UnknownFormatError for a format nobody registered."""
    if fmt == RAW:
        return [MessageRow(payload)]
    codec = _FORMATS.get(fmt)
    if codec is None or not hasattr(codec, "unpack"):
        raise UnknownFormatError(f"entries of format {fmt} cannot be unpacked into messages")
    rows: list[MessageRow] = codec.unpack(payload)
    return rows


def pack(fmt: int, rows: Seq[MessageRow], publish_time: int) -> bytes:
    """Rebuild an entry from its rows (the inverse of :func:`unpack`)."""
    if fmt == RAW:
        return rows[0].value
    codec = _FORMATS.get(fmt)
    if codec is None or not hasattr(codec, "pack"):
        raise UnknownFormatError(f"entries of format {fmt} cannot be rebuilt from messages")
    data: bytes = codec.pack(rows, publish_time)
    return data
