"""The Parquet layout of an offloaded segment (DESIGN.md decision 4).

One row per message, sorted by offset, columns::

    offset, publish_time, event_time, key, value, properties, producer_name, sequence_id,
    schema_version, entry_offset, batch_size, entry_format

``entry_offset``, ``batch_size`` (-1 = not a batch) and ``entry_format`` let a reader
rebuild the original entries, so message ids stay what they were before the offload. Timestamps are
``timestamp[us, tz=UTC]``, which is what Spark's Arrow path expects.

With an Iceberg catalog the segment's objects are the table's data files instead (layout 2,
:mod:`magnetar.tier.iceberg.columns`): the same columns under the table's names
(``__offset``…, ``__entry_offset``, ``__batch_size``, ``__entry_format``,
``__schema_version``), the original value bytes in ``value`` (no schema) or ``__value``
(beside the typed columns). :func:`as_layout` reads either as this layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.core.formats import MessageColumns
from magnetar.tier.errors import UnsupportedEntryFormatError

TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("publish_time", TS),
        pa.field("event_time", TS),
        pa.field("key", pa.string()),
        pa.field("value", pa.binary()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("producer_name", pa.string()),
        pa.field("sequence_id", pa.int64()),
        pa.field("schema_version", pa.int64()),
        pa.field("entry_offset", pa.int64(), nullable=False),
        pa.field("batch_size", pa.int32(), nullable=False),
        pa.field("entry_format", pa.int8(), nullable=False),
    ],
    metadata={"magnetar.layout": "1"},
)
# layout column → its name in a segment object that is an Iceberg data file (layout 2)
TABLE_NAMES = {
    "offset": "__offset",
    "publish_time": "__publish_time",
    "event_time": "__event_time",
    "key": "__key",
    "properties": "__properties",
    "producer_name": "__producer",
    "sequence_id": "__sequence_id",
    "schema_version": "__schema_version",
    "entry_offset": "__entry_offset",
    "batch_size": "__batch_size",
    "entry_format": "__entry_format",
}
RAW_VALUE = "__value"  # the original value bytes of a table with typed columns
_MESSAGE_FIELDS = ("offset", "event_time", "key", "value", "properties", "sequence_id")
_ENTRY_FIELDS = tuple(name for name in SCHEMA.names if name not in _MESSAGE_FIELDS)


def entries_to_table(entries: Iterable[Entry]) -> pa.Table:
    """Unpack ``entries`` into one table of messages, in offset order.

    Raises UnsupportedEntryFormatError when an entry cannot be split into exactly its
    ``count`` messages: a row per message is what keeps every offset addressable.

    Each run of entries of one format whose codec reads many entries at once
    (:class:`~magnetar.core.formats.ArrowFormat`) is read so; the others, and a run that
    path cannot read, entry by entry (which raises the error of the first bad entry).
    """
    parts = []
    for _, group in itertools.groupby(entries, key=attrgetter("format")):
        run = list(group)
        table = _arrays_table(run)
        parts.append(table if table is not None else _rows_table(run))
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts) if parts else _rows_table([])


def _rows_table(entries: Sequence[Entry]) -> pa.Table:
    table = _TableBuilder()
    for entry in entries:
        table.add(entry, _messages(entry))
    return table.build()


def _arrays_table(entries: Sequence[Entry]) -> pa.Table | None:
    """The entries' rows from their codec's ``unpack_arrays``, or None: no such codec, or
    one that raised or counted other messages (the row path then reads the entries again
    and raises its own error, for the first bad entry)."""
    unpack = getattr(formats.codec_of(entries[0].format), "unpack_arrays", None)
    if unpack is None:
        return None
    try:
        arrays: formats.MessageArrays = unpack([entry.payload for entry in entries])
        if arrays.counts != [entry.count for entry in entries]:
            return None
        return _table_of(entries, arrays)
    except Exception:  # read again entry by entry, which raises its own error
        return None


def _table_of(entries: Sequence[Entry], arrays: formats.MessageArrays) -> pa.Table:
    held = [i for i, count in enumerate(arrays.counts) if count]  # entries with messages
    counts = np.array([arrays.counts[i] for i in held], np.int64)
    firsts = np.cumsum(counts) - counts
    base = np.array([entries[i].base_offset for i in held], np.int64)
    per_entry = {
        "publish_time": [entries[i].publish_time * 1000 for i in held],
        "producer_name": [arrays.producer_names[i] for i in held],
        "schema_version": [arrays.schema_versions[i] for i in held],
        "entry_offset": base,
        "batch_size": [arrays.batch_sizes[i] for i in held],
        "entry_format": [entries[i].format for i in held],
    }
    per_message = {
        "offset": pa.array(np.repeat(base - firsts, counts) + np.arange(int(counts.sum()))),
        "event_time": pc.multiply_checked(arrays.event_times, 1000),
        "key": arrays.keys,
        "value": arrays.values,
        "properties": arrays.properties,
        "sequence_id": arrays.sequence_ids,
    }
    run_ends = pa.array(np.cumsum(counts), pa.int64())
    columns = []
    for field in SCHEMA:
        if field.name in per_message:
            columns.append(per_message[field.name].cast(field.type))
        else:
            values = pa.array(per_entry[field.name], field.type)
            columns.append(pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, values)))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _messages(entry: Entry) -> MessageColumns:
    try:
        messages = formats.unpack_columns(entry.format, entry.payload)
    except formats.UnknownFormatError as e:
        raise UnsupportedEntryFormatError(f"entry at offset {entry.base_offset}: {e}") from None
    if len(messages) != entry.count:
        raise UnsupportedEntryFormatError(
            f"entry at offset {entry.base_offset} counts {entry.count} messages but its "
            f"format-{entry.format} payload holds {len(messages)}: offsets would not survive"
        )
    return messages


class _TableBuilder:
    """Columns in the making: a list per message field, and a list per entry field whose
    values repeat for each of the entry's messages (decoded into columns by Arrow, which is
    far cheaper than a Python value per row)."""

    def __init__(self) -> None:
        self.message_columns: dict[str, list[Any]] = {name: [] for name in _MESSAGE_FIELDS}
        self.entry_columns: dict[str, list[Any]] = {name: [] for name in _ENTRY_FIELDS}
        self.run_ends: list[int] = []  # each entry's last row + 1

    def add(self, entry: Entry, messages: MessageColumns) -> None:
        n = len(messages)
        if n == 0:
            return
        rows, per_entry = self.message_columns, self.entry_columns
        rows["offset"].extend(range(entry.base_offset, entry.base_offset + n))
        rows["event_time"].extend([t * 1000 if t is not None else t for t in messages.event_times])
        rows["key"].extend(messages.keys)
        rows["value"].extend(messages.values)
        rows["properties"].extend(messages.properties)
        rows["sequence_id"].extend(messages.sequence_ids)
        per_entry["publish_time"].append(entry.publish_time * 1000)
        per_entry["producer_name"].append(messages.producer_name)
        per_entry["schema_version"].append(messages.schema_version)
        per_entry["entry_offset"].append(entry.base_offset)
        per_entry["batch_size"].append(messages.batch_size)
        per_entry["entry_format"].append(entry.format)
        self.run_ends.append(n + (self.run_ends[-1] if self.run_ends else 0))

    def build(self) -> pa.Table:
        run_ends = pa.array(self.run_ends, pa.int64())
        arrays = []
        for field in SCHEMA:
            if field.name in self.message_columns:
                arrays.append(pa.array(self.message_columns[field.name], field.type))
            else:
                values = pa.array(self.entry_columns[field.name], field.type)
                ree = pa.RunEndEncodedArray.from_arrays(run_ends, values)
                arrays.append(pc.run_end_decode(ree))
        return pa.Table.from_arrays(arrays, schema=SCHEMA)


def is_table_layout(names: list[str]) -> bool:
    """True for the columns of a segment object that is an Iceberg data file (layout 2)."""
    return "__offset" in names


def file_columns(names: list[str], wanted: list[str]) -> list[str]:
    """The columns of an object (whose columns are ``names``) holding the layout columns
    ``wanted``, in that order."""
    if not is_table_layout(names):
        return list(wanted)
    return [file_column(names, name) for name in wanted]


def file_column(names: list[str], name: str) -> str:
    if not is_table_layout(names):
        return name
    if name == "value":
        return RAW_VALUE if RAW_VALUE in names else "value"
    return TABLE_NAMES[name]


def offset_leaf(meta: Any) -> int:
    """The index of the offset column among a Parquet footer's leaf columns (the index its
    row groups' statistics go by), in either layout."""
    for i in range(meta.num_columns):
        if meta.schema.column(i).path in ("offset", "__offset"):
            return i
    raise UnsupportedEntryFormatError("a segment object without an offset column")


def as_layout(table: pa.Table) -> pa.Table:
    """An object's rows (either layout, any projection) under this layout's column names and
    types; the typed columns of a layout-2 object are left out."""
    names = table.column_names
    if not is_table_layout(names):
        return table
    arrays, fields = [], []
    for field in SCHEMA:
        column = file_column(names, field.name)
        if column in names:
            arrays.append(table.column(column).cast(field.type))
            fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=SCHEMA.metadata))


def entry_boundaries(table: pa.Table, target_rows: int) -> list[int]:
    """Row indexes where row groups of about ``target_rows`` may start without splitting
    an entry (a batch's rows stay in one row group)."""
    cuts, last = [0], 0
    for start in _entry_ends(table)[:-1]:  # where each entry but the first starts
        if start - last >= target_rows:
            cuts.append(start)
            last = start
    return cuts


def _entry_ends(table: pa.Table) -> list[int]:
    """The row after each entry's last: entries are runs of rows sharing ``entry_offset``."""
    column = "entry_offset" if "entry_offset" in table.column_names else "__entry_offset"
    starts = table.column(column).combine_chunks()
    ends: list[int] = pc.run_end_encode(starts).run_ends.to_pylist()
    return ends


def table_to_entries(table: pa.Table, segment_id: int) -> Iterator[Entry]:
    """Rebuild entries from rows (consecutive rows sharing ``entry_offset``)."""
    table = as_layout(table)
    ends = _entry_ends(table)
    firsts = table.take([0, *ends[:-1]]) if ends else table.slice(0, 0)
    starts = firsts.column("entry_offset").to_pylist()
    times = _plain(firsts.column("publish_time")).to_pylist()
    fmts = firsts.column("entry_format").to_pylist()
    producers = firsts.column("producer_name").to_pylist()
    versions = firsts.column("schema_version").to_pylist()
    batches = firsts.column("batch_size").to_pylist()
    rows = _MessageFields(table)
    i = 0
    for k, j in enumerate(ends):
        messages = rows.columns(i, j, producers[k], versions[k], batches[k])
        publish_ms = times[k] // 1000
        payload = formats.pack_columns(fmts[k], messages, publish_ms)
        yield Entry(
            starts[k], j - i, publish_ms, rows.event_time(i, j), fmts[k], payload, segment_id
        )
        i = j


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps as int64 microseconds: far cheaper to turn into Python than datetimes."""
    return column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column


class _MessageFields:
    """The per-message columns of a table as Python lists, cut into entries on request."""

    def __init__(self, table: pa.Table) -> None:
        self.values = table.column("value").to_pylist()
        self.keys = table.column("key").to_pylist()
        self.properties = _properties(table.column("properties"))
        self.sequence_ids = table.column("sequence_id").to_pylist()
        events = table.column("event_time")
        self.has_event_times = events.null_count < len(events)
        # ms, -1 for none: what a row's event time was, and what an entry's is made of.
        self.event_ms: list[int] = (
            [-1 if t is None else t // 1000 for t in _plain(events).to_pylist()]
            if self.has_event_times
            else [-1] * len(events)
        )

    def columns(
        self, i: int, j: int, producer: str | None, version: int | None, batch: int
    ) -> MessageColumns:
        if self.has_event_times:  # one before 1970 is no event time to the formats' pack
            event_times = [t if t >= 0 else None for t in self.event_ms[i:j]]
        else:
            event_times = [None] * (j - i)
        return MessageColumns(
            values=self.values[i:j],
            keys=self.keys[i:j],
            properties=self.properties[i:j],
            event_times=event_times,
            sequence_ids=self.sequence_ids[i:j],
            producer_name=producer or None,
            schema_version=version,
            batch_size=batch,
        )

    def event_time(self, i: int, j: int) -> int:
        """An entry's event time: the latest of its messages' (-1: none has one)."""
        return max(self.event_ms[i:j])


def _properties(column: pa.ChunkedArray) -> list[dict[str, str]]:
    """Each row's map as a dict, built from the flat keys and items (far cheaper than
    ``to_pylist``, which makes a list of tuples per row first)."""
    array = column.combine_chunks()
    if array.null_count:
        return [dict(p) if p else {} for p in array.to_pylist()]
    offsets = array.offsets.to_pylist()
    first, last = offsets[0], offsets[-1]
    names = array.keys.slice(first, last - first).to_pylist()
    values = array.items.slice(first, last - first).to_pylist()
    if first:
        offsets = [offset - first for offset in offsets]
    return [
        dict(zip(names[a:b], values[a:b], strict=True)) if a != b else {}
        for a, b in itertools.pairwise(offsets)
    ]
