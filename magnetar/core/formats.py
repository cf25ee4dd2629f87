"""Entry formats: how layers that know no wire protocol learn what an entry holds.

An entry is a producer's batch as received (DESIGN.md decision 2); its ``format`` byte says
which protocol wrote it. Each protocol package has an :class:`EntryFormat` for the format
it writes, named in ``_CODEC_CLASSES`` below and imported on first use; the broker asks it
for dispatch keys and sequence ids, the offloader for the
individual messages (one Parquet row each, or a column per field: :class:`MessageColumns`),
and readers of offloaded data to rebuild an equivalent entry from those rows.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

RAW = 0  # opaque bytes written by Magnetar itself: one message per entry
PULSAR = 1  # [u32 metadata size][MessageMetadata][payload] as a Pulsar producer sent it
KAFKA = 2  # a Kafka record batch


# The property a Kafka transaction marker (COMMIT or ABORT) carries as a message: in a
# Pulsar conversion, an offloaded row, a Spark row. Readers drop such messages.
KAFKA_CONTROL = "magnetar.kafka.control"

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
"""Largest message or batch, uncompressed, until :func:`limit_message_size` says otherwise
(Pulsar's and Magnetar's default ``max_message_size``)."""

_max_message_size = DEFAULT_MAX_MESSAGE_SIZE


def limit_message_size(size: int) -> None:
    """Refuse to inflate any entry beyond ``size`` bytes in this process (the server calls it
    with its ``max_message_size`` at start). Every decompression of a stored or arriving payload
    is bounded by it: a payload claiming more is refused before anything is allocated."""
    global _max_message_size
    if size <= 0:
        raise ValueError(f"max message size must be positive, not {size}")
    _max_message_size = size


def max_message_size() -> int:
    """The bound set by :func:`limit_message_size` (default :data:`DEFAULT_MAX_MESSAGE_SIZE`)."""
    return _max_message_size


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


@dataclass(slots=True)
class MessageColumns:
    """The messages of an entry, one list per field: what a list of :class:`MessageRow` holds,
    column by column, with None where a message has no such field (as Parquet stores it).

    Every list holds one item per message, in order; event times are ms since the epoch.
    ``producer_name``, ``schema_version`` and ``batch_size`` belong to the entry, as
    :func:`pack` takes them from its first row (``batch_size`` is -1 for a single message).
    """

    values: list[bytes]
    keys: list[str | None]
    properties: list[dict[str, str]]
    event_times: list[int | None]
    sequence_ids: list[int | None]
    producer_name: str | None = None
    schema_version: int | None = None
    batch_size: int = -1

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of_rows(cls, rows: Seq[MessageRow]) -> MessageColumns:
        first = rows[0] if rows else MessageRow(b"")
        return cls(
            values=[r.value for r in rows],
            keys=[r.key for r in rows],
            properties=[r.properties for r in rows],
            event_times=[r.event_time if r.event_time >= 0 else None for r in rows],
            sequence_ids=[r.sequence_id if r.sequence_id >= 0 else None for r in rows],
            producer_name=first.producer_name or None,
            schema_version=first.schema_version,
            batch_size=first.batch_size,
        )

    def rows(self) -> list[MessageRow]:
        """The messages as rows (-1 and "" where a message has no such field)."""
        return [
            MessageRow(
                value=value,
                key=key,
                properties=properties,
                event_time=-1 if event_time is None else event_time,
                producer_name=self.producer_name or "",
                sequence_id=-1 if sequence_id is None else sequence_id,
                schema_version=self.schema_version,
                batch_size=self.batch_size,
            )
            for value, key, properties, event_time, sequence_id in zip(
                self.values,
                self.keys,
                self.properties,
                self.event_times,
                self.sequence_ids,
                strict=True,
            )
        ]


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


class ColumnarFormat(UnpackingFormat, Protocol):
    """A format that also reads and writes entries column by column (Parquet, Arrow), without
    a row object per message. Results and errors are those of the row-wise calls."""

    def unpack_columns(self, payload: bytes) -> MessageColumns:
        """What ``MessageColumns.of_rows(unpack(payload))`` returns (and the entry fields even
        when there is no message, whose row would carry them)."""
        ...

    def pack_columns(self, messages: MessageColumns, publish_time: int) -> bytes:
        """What ``pack(messages.rows(), publish_time)`` returns."""
        ...


@dataclass(slots=True)
class MessageArrays:
    """The messages of several entries as Arrow arrays, in order, one item per message:
    what :class:`MessageColumns` of each entry hold, concatenated (null where a message has
    no such field), plus each entry's own fields, one item per entry."""

    counts: list[int]  # messages of each entry
    values: pa.Array  # binary
    keys: pa.Array  # string
    properties: pa.Array  # map<string, string>
    event_times: pa.Array  # int64, ms since the epoch
    sequence_ids: pa.Array  # int64
    producer_names: list[str | None]
    schema_versions: list[int | None]
    batch_sizes: list[int]


class ArrowFormat(Protocol):
    """A format that reads many entries into Arrow arrays at once (an offloaded segment)."""

    def unpack_arrays(self, payloads: Seq[bytes]) -> MessageArrays:
        """What :meth:`ColumnarFormat.unpack_columns` gives for each payload, as arrays.
        Raises when a payload cannot be read, not necessarily the error ``unpack_columns``
        gives for the first such payload: callers read the entries one by one for that."""
        ...


# Which codec reads entries of each format, imported on first use (pyiceberg picks its
# FileIO implementations the same way). Storage, tier and broker only pass entries along and
# never import a protocol package, yet Key_Shared dispatch, deduplication and offload find
# the codec without anyone importing a protocol package for its side effects first.
_CODEC_CLASSES = {
    PULSAR: "magnetar.protocols.pulsar.entry_format:PulsarEntryFormat",
    KAFKA: "magnetar.protocols.kafka.entry_format:KafkaEntryFormat",
}
_FORMATS: dict[int, EntryFormat] = {}


def register(fmt: int, codec: EntryFormat) -> None:
    """Use ``codec`` for entries of format ``fmt`` (tests; formats beyond the built-in ones)."""
    _FORMATS[fmt] = codec


def codec_of(fmt: int) -> EntryFormat | None:
    """The codec of format ``fmt``, or None for a format nobody knows (and RAW)."""
    codec = _FORMATS.get(fmt)
    if codec is None and fmt in _CODEC_CLASSES:
        module, _, name = _CODEC_CLASSES[fmt].partition(":")
        codec = getattr(importlib.import_module(module), name)()
        _FORMATS[fmt] = codec
    return codec


def key_of(fmt: int, payload: bytes) -> bytes | None:
    codec = codec_of(fmt)
    return codec.key(payload) if codec else None


def sequence_of(fmt: int, payload: bytes) -> Sequence | None:
    codec = codec_of(fmt)
    return codec.sequence(payload) if codec else None


def deliver_at_of(fmt: int, payload: bytes) -> int | None:
    """When the entry asked to be delivered (ms since the epoch; Pulsar's ``deliver_at_time``),
    or None for an entry to deliver at once (and for formats that cannot ask)."""
    codec = codec_of(fmt)
    deliver_at = getattr(codec, "deliver_at", None)
    return deliver_at(payload) if deliver_at is not None else None


def compaction_keys_of(fmt: int, payload: bytes) -> list[tuple[bytes | None, bool]] | None:
    """(key, null value?) of each message of the entry, for topic compaction; None for a
    format that cannot say (its messages are left out of a compacted view, as keyless ones)."""
    codec = codec_of(fmt)
    keys = getattr(codec, "compaction_keys", None)
    return keys(payload) if keys is not None else None


@dataclass(frozen=True, slots=True)
class TransactionMark:
    """What a transactional entry says of its transaction (Kafka's KIP-98 batches)."""

    producer_id: int
    control: bool  # a COMMIT / ABORT marker, not data
    commit: bool = False  # for a marker: COMMIT (else ABORT)


def transaction_of(fmt: int, payload: bytes) -> TransactionMark | None:
    """The transaction an entry belongs to, or None for an entry outside any transaction
    (and for formats that have none)."""
    codec = codec_of(fmt) if fmt != RAW else None
    mark = getattr(codec, "transaction", None)
    return mark(payload) if mark is not None else None


class UnknownFormatError(ValueError):
    """No registered format can unpack or rebuild entries of this format."""


def unpack(fmt: int, payload: bytes) -> list[MessageRow]:
    """The messages of an entry. Raises UnknownFormatError for a format nobody registered."""
    if fmt == RAW:
        return [MessageRow(payload)]
    codec = codec_of(fmt)
    if codec is None or not hasattr(codec, "unpack"):
        raise UnknownFormatError(f"entries of format {fmt} cannot be unpacked into messages")
    rows: list[MessageRow] = codec.unpack(payload)
    return rows


def unpack_columns(fmt: int, payload: bytes) -> MessageColumns:
    """The messages of an entry as columns: ``MessageColumns.of_rows(unpack(fmt, payload))``,
    faster for formats that implement :class:`ColumnarFormat`. Raises as :func:`unpack`."""
    if fmt == RAW:
        return MessageColumns([payload], [None], [{}], [None], [None])
    codec = codec_of(fmt)
    if codec is not None and hasattr(codec, "unpack_columns"):
        columns: MessageColumns = codec.unpack_columns(payload)
        return columns
    return MessageColumns.of_rows(unpack(fmt, payload))


def pack(fmt: int, rows: Seq[MessageRow], publish_time: int) -> bytes:
    """Rebuild an entry from its rows (the inverse of :func:`unpack`)."""
    if fmt == RAW:
        return rows[0].value
    codec = codec_of(fmt)
    if codec is None or not hasattr(codec, "pack"):
        raise UnknownFormatError(f"entries of format {fmt} cannot be rebuilt from messages")
    data: bytes = codec.pack(rows, publish_time)
    return data


def pack_columns(fmt: int, messages: MessageColumns, publish_time: int) -> bytes:
    """Rebuild an entry from its messages as columns: ``pack(fmt, messages.rows(), ...)``,
    faster for formats that implement :class:`ColumnarFormat`."""
    codec = codec_of(fmt) if fmt != RAW else None
    if codec is not None and hasattr(codec, "pack_columns"):
        data: bytes = codec.pack_columns(messages, publish_time)
        return data
    return pack(fmt, messages.rows(), publish_time)
