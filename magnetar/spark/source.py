"""The ``magnetar`` PySpark data source: batch and streaming reads, batch and streaming writes.

History and tail in one source (seed 001): input partitions are segment ranges, read by the
executors straight from the object store (offloaded Parquet) or from the storage node's
Arrow Flight endpoint (local segments) — never through the per-message consumer protocol.
Streaming offsets are ``{"<topic>": {"<partition>": offset}}`` with sorted keys.

Catalog tables (:mod:`.catalog`) carry their options in the field metadata of the table
schema (key ``magnetar.options``): Spark 4.3 stores no OPTIONS for tables of a Python data
source, but hands the reader the table's schema, metadata included.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from magnetar.spark import planning
from magnetar.spark.options import LATEST, ReadOptions, SparkSourceError, normalize, parse
from magnetar.spark.planning import Slice
from magnetar.spark.reading import read_slice
from magnetar.tier.rows import BASE_DDL, arrow_schema, record_type

log = logging.getLogger(__name__)
Offsets = dict[str, dict[str, int]]
OPTIONS_KEY = "magnetar.options"  # field metadata: a catalog table's options, as JSON


class MagnetarPartition(InputPartition):
    """A slice to read, with what its rows need: the JSON record definition (for ``data``)
    and the columns asked for (None: all)."""

    def __init__(self, piece: Slice, definition: Any, columns: list[str] | None) -> None:
        super().__init__(piece)
        self.piece = piece
        self.definition = definition
        self.columns = columns


def data_definition(plans: dict[str, dict[str, Any]]) -> Any:
    """The record definition shared by every topic read (JSON schema), or None.

    Only JSON topics get a ``data`` column: their values are decoded as JSON text. AVRO
    values are binary Avro, which this source does not decode (read ``value``).
    """
    schemas: list[dict[str, Any]] = [p["schema"] for p in plans.values() if p.get("schema")]
    if not schemas or len(schemas) != len(plans):
        return None
    definitions = {repr(s["definition"]) for s in schemas}
    if len(definitions) != 1 or schemas[0]["type"] != "JSON":
        return None
    definition = schemas[0]["definition"]
    return definition if record_type(definition) else None


def _data_type(definition: Any) -> pa.DataType | None:
    mapped = record_type(definition) if definition is not None else None
    return mapped[0] if mapped else None


def _wanted(definition: Any, schema: StructType | None) -> tuple[Any, list[str] | None]:
    """The record definition still needed and the columns to build for ``schema`` — the
    source's own, or one the user gave (``.schema("key string, offset long")``: Python
    data sources get no column pruning, so a narrower schema is how a query skips
    building and shipping columns). Raises SparkSourceError, before any task runs, for a
    column the source does not have or a type other than the source's."""
    if schema is None:
        return definition, None
    full = arrow_schema(_data_type(definition))
    wanted = to_arrow_schema(schema, timezone="UTC")
    for f in wanted:
        i = full.get_field_index(f.name)
        if i < 0:
            raise SparkSourceError(
                f"schema column {f.name!r} is not one of the source's: {', '.join(full.names)}"
            )
        if not full.field(i).type.equals(f.type):
            raise SparkSourceError(
                f"schema column {f.name!r} must have the type {full.field(i).type}, not {f.type}"
            )
    columns = None if wanted.names == full.names else wanted.names
    return (definition if "data" in wanted.names else None), columns


def table_options(options: Mapping[str, str], schema: StructType) -> dict[str, str]:
    """``options`` plus those a catalog table keeps in its schema's field metadata."""
    merged: dict[str, str] = {}
    for f in schema.fields:
        raw = (f.metadata or {}).get(OPTIONS_KEY)
        if raw:
            merged.update(normalize(json.loads(raw)))
    return {**merged, **normalize(options)}


class MagnetarDataSource(DataSource):
    """``spark.read.format("magnetar")`` and ``spark.readStream.format("magnetar")``."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        opts = parse(self.options, streaming=False)
        definition = data_definition(planning.fetch_plans(opts))
        mapped = record_type(definition) if definition is not None else None
        return BASE_DDL + (f", data {mapped[1]}" if mapped else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse(table_options(self.options, schema), streaming=False)
        return MagnetarBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse(table_options(self.options, schema), streaming=True)
        return MagnetarStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from magnetar.spark.sink import MagnetarWriter

        if overwrite:  # as Spark's Kafka sink: a log cannot be overwritten
            raise SparkSourceError(
                'a Magnetar topic is an append-only log: write with .mode("append") '
                "(overwrite would have to delete its history)"
            )
        return MagnetarWriter(table_options(self.options, schema), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from magnetar.spark.sink import MagnetarStreamWriter

        return MagnetarStreamWriter(table_options(self.options, schema), schema)


class MagnetarBatchReader(DataSourceReader):
    """A bounded read; everything is resolved on the driver, before any task runs."""

    def __init__(self, opts: ReadOptions, schema: StructType | None = None) -> None:
        plans = planning.fetch_plans(opts)
        start = planning.bounds(plans, opts.starting, end=False)
        end = planning.bounds(plans, opts.ending, end=True)
        start = planning.check_data_loss(plans, start, opts.fail_on_data_loss)
        pieces = planning.slices(plans, start, end, min_ts=opts.starting_ts, max_ts=opts.ending_ts)
        self.pieces = planning.split(pieces, opts.min_partitions)
        self.definition, self.columns = _wanted(data_definition(plans), schema)

    def partitions(self) -> list[InputPartition]:
        return [MagnetarPartition(p, self.definition, self.columns) for p in self.pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The tail after the history, in micro-batches; offsets live in Spark's checkpoint and,
    with the ``subscription`` option, in a durable subscription too."""

    def __init__(self, opts: ReadOptions, schema: StructType | None = None) -> None:
        self.opts = opts
        self.target: Offsets | None = None
        self.committed: Offsets | None = None  # last offsets given to the subscription
        definition = data_definition(planning.fetch_plans(opts))
        self.definition, self.columns = _wanted(definition, schema)

    def initialOffset(self) -> Offsets:
        plans = planning.fetch_plans(self.opts)
        if self.opts.starting_ts is not None:
            return _time_start(plans, self.opts.starting_ts)
        return planning.bounds(plans, self.opts.starting, end=False)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_per_trigger:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = planning.bounds(planning.fetch_plans(self.opts), LATEST, end=True)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        # Spark asks for the next batch only once the previous one is committed to its sink,
        # so ``start`` is processed: move the subscription now. Spark's own commit() comes
        # only after the *next* batch is planned — never for the last batch of availableNow.
        self._commit_subscription(start)
        latest = planning.bounds(planning.fetch_plans(self.opts), LATEST, end=True)
        if self.target is not None:
            latest = _cap(latest, self.target)
        begin = _fill(start, latest)
        if isinstance(limit, ReadMaxRows):
            latest = _limit(begin, latest, limit.max_rows)
        return {t: dict(sorted(p.items())) for t, p in sorted(latest.items())}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        plans = planning.fetch_plans(self.opts)
        begin = planning.check_data_loss(plans, _fill(start, end), self.opts.fail_on_data_loss)
        pieces = planning.slices(plans, begin, end, min_ts=self.opts.starting_ts)
        return [MagnetarPartition(p, self.definition, self.columns) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition)

    def commit(self, end: Offsets) -> None:
        self._commit_subscription(end)

    def _commit_subscription(self, processed: Offsets) -> None:
        """Move the durable subscription (option ``subscription``) to ``processed``."""
        if not self.opts.subscription or processed == self.committed:
            return
        for topic, parts in processed.items():
            url = self.opts.url + planning.plan_path(topic).removesuffix("/plan")
            url += f"/subscription/{self.opts.subscription}/commit"
            planning.http_post(url, {"offsets": parts}, self.opts.token)
        self.committed = processed

    def stop(self) -> None:
        return None


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark hands a bare InputPartition to read() when a micro-batch planned none: no rows.
    if isinstance(partition, MagnetarPartition):
        data_type = _data_type(partition.definition)
        yield from read_slice(partition.piece, data_type, partition.columns)


def _fill(start: Offsets, like: Offsets) -> Offsets:
    """``start`` with partitions that appeared since (grown topics) starting at 0."""
    return {
        t: dict(sorted({**{p: 0 for p in parts}, **start.get(t, {})}.items()))
        for t, parts in sorted(like.items())
    }


def _cap(latest: Offsets, target: Offsets) -> Offsets:
    return {
        t: {p: min(o, target.get(t, {}).get(p, o)) for p, o in sorted(parts.items())}
        for t, parts in sorted(latest.items())
    }


def _limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Spread ``max_rows`` over partitions in proportion to what each has available."""
    avail = {
        (t, p): max(0, o - start[t][p]) for t, parts in latest.items() for p, o in parts.items()
    }
    total = sum(avail.values())
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(parts) for t, parts in start.items()}
    budget = max_rows
    for (t, p), n in sorted(avail.items()):
        take = min(n, budget, max(1, n * max_rows // total)) if budget else 0
        out[t][p] = start[t][p] + take
        budget -= take
    return out


def _time_start(plans: dict[str, dict[str, Any]], ts: int) -> Offsets:
    """First offset of the first segment that may hold messages at or after ``ts``."""
    out: Offsets = {}
    for topic, plan in sorted(plans.items()):
        out[topic] = {}
        for p in plan["partitions"]:
            first = next(
                (
                    s["first"]
                    for s in p["segments"]
                    if s["maxTime"] is not None and s["maxTime"] >= ts
                ),
                p["end"],
            )
            out[topic][str(p["index"])] = max(first, p["start"])
    return out
