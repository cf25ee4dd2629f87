"""The Parquet layout of an offloaded segment (DESIGN.md decision 4).

One row per message, sorted by offset, columns::

    offset, publish_time, event_time, key, value, properties, producer_name, sequence_id,
    schema_version, entry_offset, batch_size, entry_format

``entry_offset``, ``batch_size`` (-1 = not a batch) and ``entry_format`` let a reader
rebuild the original entries, so message ids stay what they were before the offload. Timestamps are
``timestamp[us, tz=UTC]``, which is what Spark's Arrow path expects.
"""

from __future__ import annotations

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
        for i, row in enumerate(_messages(entry)):
            _append(cols, entry, i, row)
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


def _append(cols: dict[str, list[object]], entry: Entry, i: int, row: MessageRow) -> None:
    cols["offset"].append(entry.base_offset + i)
    cols["publish_time"].append(entry.publish_time * 1000)
    cols["event_time"].append(row.event_time * 1000 if row.event_time >= 0 else None)
    cols["key"].append(row.key)
    cols["value"].append(row.value)
    cols["properties"].append(list(row.properties.items()))
    cols["producer_name"].append(row.producer_name or None)
    cols["sequence_id"].append(row.sequence_id if row.sequence_id >= 0 else None)
    cols["schema_version"].append(row.schema_version)
    cols["entry_offset"].append(entry.base_offset)
    cols["batch_size"].append(row.batch_size)
    cols["entry_format"].append(entry.format)


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
    n = table.num_rows
    i = 0
    while i < n:
        start = data["entry_offset"][i]
        j = i
        while j < n and data["entry_offset"][j] == start:
            j += 1
        rows = [_row(data, k) for k in range(i, j)]
        publish_ms = data["publish_time"][i] // 1000
        count = j - i
        fmt = data["entry_format"][i]
        payload = formats.pack(fmt, rows, publish_ms)
        event = max((r.event_time for r in rows), default=-1)
        yield Entry(start, count, publish_ms, event, fmt, payload, segment_id)
        i = j


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps as int64 microseconds: far cheaper to turn into Python than datetimes."""
    return column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column


def _row(data: dict[str, list[Any]], k: int) -> MessageRow:
    event = data["event_time"][k]
    seq = data["sequence_id"][k]
    return MessageRow(
        value=data["value"][k],
        key=data["key"][k],
        properties=dict(data["properties"][k] or []),
        event_time=event // 1000 if event is not None else -1,
        producer_name=data["producer_name"][k] or "",
        sequence_id=seq if seq is not None else -1,
        schema_version=data["schema_version"][k],
        batch_size=data["batch_size"][k],
    )
