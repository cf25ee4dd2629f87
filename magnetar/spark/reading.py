"""Reading one planned slice on an executor, straight from where the data lives."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from magnetar.core.formats import KAFKA_CONTROL
from magnetar.spark.planning import Slice
from magnetar.tier.object_store import open_object_store
from magnetar.tier.parquet import as_layout, file_columns, offset_leaf
from magnetar.tier.rows import PARQUET_COLUMNS, to_rows

BATCH_ROWS = 64_000


def read_slice(
    s: Slice, data_type: pa.DataType | None, columns: Sequence[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``s`` in the reader row layout (Spark's schema, exactly): every
    column, or only ``columns`` (see :func:`magnetar.tier.rows.to_rows`)."""
    tables = {"parquet": _parquet, "node": _node}.get(s.kind, _flight)(s)
    for table in tables:
        table = _filter(table, s)
        if table.num_rows:
            rows = to_rows(table, s.topic, s.partition, data_type, columns)
            yield from rows.to_batches(BATCH_ROWS)


def _parquet(s: Slice) -> Iterator[pa.Table]:
    store = open_object_store(s.location)
    parquet = pq.ParquetFile(store.open(s.key))
    meta = parquet.metadata
    names = parquet.schema_arrow.names  # the tier's layout, or an Iceberg data file's
    col = offset_leaf(meta)
    columns = file_columns(names, PARQUET_COLUMNS)
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(col).statistics
        if stats is not None and (stats.max < s.start or stats.min >= s.end):
            continue  # this row group lies outside the slice: never read it
        yield as_layout(parquet.read_row_group(g, columns=columns))


def _flight(s: Slice) -> Iterator[pa.Table]:
    import pyarrow.flight as flight

    client = flight.connect(s.location)
    try:
        request = {"topic": s.partition_path, "start": s.start, "end": s.end}
        if s.grant:
            request["grant"] = s.grant
        reader = client.do_get(flight.Ticket(json.dumps(request)))
        for chunk in reader:
            yield pa.Table.from_batches([chunk.data])
    finally:
        client.close()


def _node(s: Slice) -> Iterator[pa.Table]:
    """A closed ledger's range from the first storage node that serves it; through the
    broker when none does (all down, or the ledger moved meanwhile)."""
    import pyarrow.flight as flight

    ticket = flight.Ticket(json.dumps({"ledger": s.segment, "start": s.start, "end": s.end}))
    for url in s.replicas:
        client = flight.connect(url)
        try:
            tables = [pa.Table.from_batches([c.data]) for c in client.do_get(ticket)]
        except (flight.FlightError, OSError):
            continue  # the next replica
        finally:
            client.close()
        yield from tables
        return
    yield from _flight(s)


def _filter(table: pa.Table, s: Slice) -> pa.Table:
    if not table.num_rows:
        return table
    if s.transactions:
        table = _committed(table, s)
        if not table.num_rows:
            return table
    offsets = table.column("offset")
    inside = offsets[0].as_py() >= s.start and offsets[-1].as_py() < s.end
    if inside and s.min_ts is None and s.max_ts is None:
        return table  # rows come in offset order: wholly inside the slice, the common case
    mask = pc.and_(pc.greater_equal(offsets, s.start), pc.less(offsets, s.end))
    times = table.column("publish_time")
    if s.min_ts is not None:
        mask = pc.and_(mask, pc.greater_equal(times, _ts(s.min_ts)))
    if s.max_ts is not None:
        mask = pc.and_(mask, pc.less(times, _ts(s.max_ts)))
    return table.filter(mask)


def _committed(table: pa.Table, s: Slice) -> pa.Table:
    """Without Kafka transaction markers and the rows of aborted transactions (a marker's
    row carries the KAFKA_CONTROL property; an aborted transaction's rows its producer id)."""
    marker = pc.is_valid(pc.map_lookup(table.column("properties"), KAFKA_CONTROL, "first"))
    hidden = pc.fill_null(marker, False)
    offsets, producers = table.column("offset"), table.column("producer_name")
    for pid, first, last in s.aborted:
        mine = pc.fill_null(pc.starts_with(producers, f"kafka-{pid}-"), False)
        inside = pc.and_(pc.greater_equal(offsets, first), pc.less_equal(offsets, last))
        hidden = pc.or_(hidden, pc.and_(mine, inside))
    return table.filter(pc.invert(hidden))


def _ts(ms: int) -> Any:
    return pa.scalar(ms * 1000, pa.timestamp("us", tz="UTC"))
