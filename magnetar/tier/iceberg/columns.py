"""The rows of a topic's Iceberg table, built from the tier's Parquet layout.

Envelope columns (every table)::

    __offset long, __partition int, __publish_time timestamptz, __event_time timestamptz,
    __key string, __properties map<string,string>, __producer string, __sequence_id long

then, when the topic has a JSON or AVRO record schema, one typed column per field of the
schema (nested records as structs, arrays as lists), else ``value binary``. The fields are
the union of every schema version, in version order, so a field added by a later version
(optional, as Pulsar's compatibility rules require) is a column added at the end: the
Iceberg schema update that follows the topic's.

The segment objects of a topic with a catalog *are* its data files (layout 2 of
:mod:`magnetar.tier.parquet`): after the typed columns come the tier's own, which rebuild
the original entries byte for byte — ``__schema_version``, ``__entry_offset``,
``__batch_size``, ``__entry_format`` and ``__value`` (the value as sent; only beside typed
columns, a ``value binary`` table holds it already) — between the envelope and the typed
columns. Readers of the typed columns ignore them; rows registered from an older segment
object hold them null.

Values are decoded per row with the schema version the producer wrote them with (AVRO's
writer schema; JSON needs none). A value that does not decode, or does not fit the column
types, leaves every typed column of its row null: the envelope, and the tier's own copy of
the original bytes, are still there.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.tier.rows import (
    as_logical,
    decode_json_values,
    iceberg_type,
    record_type,
    row_or_none,
)

TS = pa.timestamp("us", tz="UTC")
ENVELOPE = [
    pa.field("__offset", pa.int64(), nullable=False),
    pa.field("__partition", pa.int32(), nullable=False),
    pa.field("__publish_time", TS),
    pa.field("__event_time", TS),
    pa.field("__key", pa.string()),
    pa.field("__properties", pa.map_(pa.string(), pa.string())),
    pa.field("__producer", pa.string()),
    pa.field("__sequence_id", pa.int64()),
]
_FROM_LAYOUT = {
    "__offset": "offset",
    "__publish_time": "publish_time",
    "__event_time": "event_time",
    "__key": "key",
    "__properties": "properties",
    "__producer": "producer_name",
    "__sequence_id": "sequence_id",
}
VALUE = pa.field("value", pa.binary())
RAW_VALUE = pa.field("__value", pa.binary())
TIER_COLUMNS = [
    pa.field("__schema_version", pa.int64()),
    pa.field("__entry_offset", pa.int64()),
    pa.field("__batch_size", pa.int32()),
    pa.field("__entry_format", pa.int32()),
]
RECORD_SCHEMAS = ("JSON", "AVRO")
DAY_MICROS = 86_400_000_000


@dataclass(frozen=True, slots=True)
class ValueSchema:
    """A topic's value schema: its type (``JSON``, ``AVRO``, …) and every version's
    definition (the Avro-style record, parsed), oldest first."""

    type: str
    versions: tuple[Any, ...]

    @property
    def record(self) -> pa.StructType | None:
        """The union of every version's fields as one struct, or None when the values stay
        binary (no record schema, or a type this mapping does not cover). Each field has
        the type its values are stored as."""
        return self._union(logical=False)

    @property
    def logical_record(self) -> pa.StructType | None:
        """:attr:`record` with the fields' logical types (dates, times, timestamps, and an
        AVRO schema's decimals) in the units they are stored in; :func:`iceberg_type` gives
        the column types. A field whose logical type a later version changed keeps the
        first one (its column cannot change type)."""
        return self._union(logical=True)

    def _union(self, *, logical: bool) -> pa.StructType | None:
        if self.type not in RECORD_SCHEMAS or not self.versions:
            return None
        fields: dict[str, pa.Field] = {}
        stored: dict[str, pa.DataType] = {}
        for definition in self.versions:
            mapped = record_type(definition, logical=logical, decimals=self.type == "AVRO")
            plain = record_type(definition)
            if mapped is None or plain is None:
                return None
            for f, p in zip(mapped[0], plain[0], strict=True):
                if f.name.startswith("__"):
                    return None  # would shadow an envelope column
                if f.name in fields and stored[f.name] == p.type and fields[f.name] != f:
                    continue  # the same stored type, another logical type: the first stays
                fields[f.name] = f  # a later version may widen a type (int → long)
                stored[f.name] = p.type
        return pa.struct(list(fields.values()))


def table_schema(
    value_schema: ValueSchema | None, *, tier_columns: bool = False, logical: bool = False
) -> pa.Schema:
    """The Arrow schema of a topic's Iceberg rows (with ``tier_columns``: of the data files
    that are also the tier's segment objects; with ``logical``: typed by the fields'
    logical types, see :attr:`ValueSchema.logical_record`)."""
    record = _record(value_schema, logical)
    typed = list(iceberg_type(record)) if record is not None else [VALUE]
    tier = TIER_COLUMNS + ([RAW_VALUE] if record is not None else []) if tier_columns else []
    return pa.schema([*ENVELOPE, *tier, *typed])  # typed last: evolution appends to them


def to_table_rows(
    layout: pa.Table,
    partition: int,
    value_schema: ValueSchema | None,
    *,
    tier_columns: bool = False,
    logical: bool = False,
) -> pa.Table:
    """Rows of the tier's Parquet layout → rows of the topic's Iceberg table (with
    ``tier_columns``: also the columns that rebuild the original entries; with
    ``logical``: typed by the fields' logical types)."""
    schema = table_schema(value_schema, tier_columns=tier_columns, logical=logical)
    record = value_schema.record if value_schema is not None else None
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for field in ENVELOPE:
        if field.name == "__partition":
            arrays.append(pa.repeat(pa.scalar(partition, pa.int32()), layout.num_rows))
        else:
            arrays.append(layout.column(_FROM_LAYOUT[field.name]))
    if tier_columns:
        for field in TIER_COLUMNS:
            arrays.append(layout.column(field.name.removeprefix("__")).cast(field.type))
        if record is not None:
            arrays.append(layout.column("value"))
    if record is None:
        arrays.append(layout.column("value"))
    else:
        assert value_schema is not None
        values: pa.Array = _decode(layout, value_schema, record)
        typed = _record(value_schema, logical)
        if logical and typed is not None:
            values = as_logical(values, typed)
        arrays.extend(values.flatten())
    return pa.Table.from_arrays(arrays, schema=schema)


def _record(value_schema: ValueSchema | None, logical: bool) -> pa.StructType | None:
    if value_schema is None:
        return None
    return value_schema.logical_record if logical else value_schema.record


def _decode(layout: pa.Table, value_schema: ValueSchema, record: pa.StructType) -> pa.StructArray:
    if value_schema.type == "JSON":
        decoded: pa.Array = decode_json_values(layout.column("value"), record)
    else:
        raw = layout.column("value").to_pylist()
        versions = layout.column("schema_version").to_pylist()
        decoded = _decode_avro(raw, versions, value_schema.versions, record)
    assert isinstance(decoded, pa.StructArray)
    return decoded


def _decode_avro(
    raw: Sequence[bytes | None],
    versions: Sequence[int | None],
    definitions: Sequence[Any],
    record: pa.StructType,
) -> pa.Array:
    import fastavro  # a dependency already (the console decodes AVRO topics)

    parsed: dict[int, Any] = {}
    names = [f.name for f in record]
    rows: list[dict[str, Any] | None] = []
    latest = len(definitions) - 1
    for value, version in zip(raw, versions, strict=True):
        v = latest if version is None or not 0 <= version <= latest else version
        if v not in parsed:
            parsed[v] = fastavro.parse_schema(_underlying(definitions[v]))
        stream = io.BytesIO(value or b"")
        try:
            obj = fastavro.schemaless_reader(stream, parsed[v], None)
        except Exception:  # a value that is not what its schema says: typed columns null
            obj = None
        if stream.tell() != len(value or b""):
            obj = None  # bytes after the value: not a value of this schema
        rows.append({k: obj.get(k) for k in names} if isinstance(obj, dict) else None)
    try:
        return pa.array(rows, type=record)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeError):
        return pa.array([row_or_none(r, record) for r in rows], type=record)


def _underlying(definition: Any) -> Any:
    """An Avro schema without its logical types: a ``timestamp-millis`` field reads as the
    long it is stored as, which is the column's type (:func:`record_type` maps a field to
    its underlying type), not as a datetime the column cannot hold."""
    if isinstance(definition, dict):
        return {k: _underlying(v) for k, v in definition.items() if k != "logicalType"}
    if isinstance(definition, list):
        return [_underlying(d) for d in definition]
    return definition


def _days(rows: pa.Table) -> pa.Array:
    """Days since 1970 (UTC) of each row's ``__publish_time``."""
    micros = rows.column("__publish_time").combine_chunks().cast(pa.int64())
    below = pc.if_else(pc.less(micros, 0), DAY_MICROS - 1, 0)
    days: pa.Array = pc.divide(pc.subtract(micros, below), DAY_MICROS)
    return days


def split_runs(rows: pa.Table) -> list[tuple[int, pa.Table]]:
    """``rows`` (in offset order) cut where the UTC day of ``__publish_time`` changes: each
    piece a contiguous offset range within one day (a data file of a
    ``day(__publish_time)`` table lies in one day), sliced without a copy. Nearly always one
    piece per segment, two when it spans midnight."""
    if rows.num_rows == 0:
        return []
    runs = pc.run_end_encode(_days(rows))
    out, start = [], 0
    for end, day in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
        out.append((int(day), rows.slice(start, end - start)))
        start = end
    return out


def split_by_day(rows: pa.Table) -> list[tuple[int, pa.Table]]:
    """``rows`` cut into one table per UTC day of ``__publish_time`` (days since 1970),
    each in offset order: a data file of a ``day(__publish_time)`` table lies in one day."""
    micros = rows.column("__publish_time").cast(pa.int64())
    days = pc.divide(
        pc.subtract(micros, pc.if_else(pc.less(micros, 0), DAY_MICROS - 1, 0)), DAY_MICROS
    )
    if rows.num_rows == 0:
        return []
    out = []
    for day in pc.unique(days).to_pylist():
        out.append((int(day), rows.filter(pc.equal(days, day))))
    return sorted(out, key=lambda item: item[0])
