"""The Parquet layout of an offloaded segment (DESIGN.md decision 4).

One row per message, sorted by offset, columns::

    offset, publish_time, event_time, key, value, properties, producer_name, sequence_id,
    schema_version, entry_offset, batch_size, entry_format

``entry_offset``, ``batch_size`` (-1 = not a batch) and ``entry_format`` let a reader
rebuild the original entries, so message ids stay what they were before the offload. Timestamps are
``timestamp[us, tz=UTC]``, which is what Spark's Arrow path expects.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from magnetar.core import formats
from magnetar.core.formats import MessageRow
from magnetar.storage import Entry
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


def entries_to_table(entries: Iterable[Entry]) -> pa.Table:
    """Unpack ``entries`` into one table of messages, in offset order.

    Raises UnsupportedEntryFormatError when an entry cannot be split into exactly its
    ``count`` messages: a row per message is what keeps every offset addressable.
    """
    cols: dict[str, list[object]] = {name: [] for name in SCHEMA.names}
    for entry in entries:
        _add_entry(cols, entry, _messages(entry))
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def _messages(entry: Entry) -> list[MessageRow]:
    try:
        rows = formats.unpack(entry.format, entry.payload)
    except formats.UnknownFormatError as e:
        raise UnsupportedEntryFormatError(f"entry at offset {entry.base_offset}: {e}") from None
    if len(rows) != entry.count:
        raise UnsupportedEntryFormatError(
            f"entry at offset {entry.base_offset} counts {entry.count} messages but its "
            f"format-{entry.format} payload holds {len(rows)}: offsets would not survive"
        )
    return rows


def _add_entry(cols: dict[str, list[object]], entry: Entry, rows: list[MessageRow]) -> None:
    """One column at a time (a comprehension per column is far cheaper than a call per row)."""
    n, base = len(rows), entry.base_offset
    cols["offset"].extend(range(base, base + n))
    cols["publish_time"].extend(itertools.repeat(entry.publish_time * 1000, n))
    cols["event_time"].extend([r.event_time * 1000 if r.event_time >= 0 else None for r in rows])
    cols["key"].extend([r.key for r in rows])
    cols["value"].extend([r.value for r in rows])
    cols["properties"].extend([list(r.properties.items()) for r in rows])
    cols["producer_name"].extend([r.producer_name or None for r in rows])
    cols["sequence_id"].extend([r.sequence_id if r.sequence_id >= 0 else None for r in rows])
    cols["schema_version"].extend([r.schema_version for r in rows])
    cols["entry_offset"].extend(itertools.repeat(base, n))
    cols["batch_size"].extend([r.batch_size for r in rows])
    cols["entry_format"].extend(itertools.repeat(entry.format, n))


def entry_boundaries(table: pa.Table, target_rows: int) -> list[int]:
    """Row indexes where row groups of about ``target_rows`` may start without splitting
    an entry (a batch's rows stay in one row group)."""
    starts = table.column("entry_offset").to_pylist()
    cuts, last = [0], 0
    for i in range(1, len(starts)):
        if i - last >= target_rows and starts[i] != starts[i - 1]:
            cuts.append(i)
            last = i
    return cuts


def table_to_entries(table: pa.Table, segment_id: int) -> Iterator[Entry]:
    """Rebuild entries from rows (consecutive rows sharing ``entry_offset``)."""
    data = {name: _plain(table.column(name)).to_pylist() for name in table.column_names}
    rows = _rows(data)
    starts, times, fmts = data["entry_offset"], data["publish_time"], data["entry_format"]
    n, i = len(rows), 0
    while i < n:
        j = i + 1
        while j < n and starts[j] == starts[i]:
            j += 1
        publish_ms = times[i] // 1000
        payload = formats.pack(fmts[i], rows[i:j], publish_ms)
        event = max(r.event_time for r in rows[i:j])
        yield Entry(starts[i], j - i, publish_ms, event, fmts[i], payload, segment_id)
        i = j


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps as int64 microseconds: far cheaper to turn into Python than datetimes."""
    return column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column


def _rows(data: dict[str, list[Any]]) -> list[MessageRow]:
    return [
        MessageRow(
            value=value,
            key=key,
            properties=dict(properties) if properties else {},
            event_time=event // 1000 if event is not None else -1,
            producer_name=producer or "",
            sequence_id=sequence if sequence is not None else -1,
            schema_version=version,
            batch_size=batch,
        )
        for value, key, properties, event, producer, sequence, version, batch in zip(
            data["value"],
            data["key"],
            data["properties"],
            data["event_time"],
            data["producer_name"],
            data["sequence_id"],
            data["schema_version"],
            data["batch_size"],
            strict=True,
        )
    ]
