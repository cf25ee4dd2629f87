"""The row layout readers see (Spark's, through ``magnetar.spark``), built from the
Parquet layout of :mod:`magnetar.tier.parquet` — whether the rows came from an offloaded
object or from the storage node's bulk reader, one function shapes them.

Columns (Spark's Kafka source names where the meaning is the same)::

    key string, value binary, topic string, partition int, offset long,
    publishTime timestamp, eventTime timestamp, properties map<string,string>,
    producerName string, sequenceId long [, data struct<...> when the topic has a JSON schema]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
BASE_FIELDS = [
    pa.field("key", pa.string()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("publishTime", TS),
    pa.field("eventTime", TS),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("producerName", pa.string()),
    pa.field("sequenceId", pa.int64()),
]
BASE_DDL = (
    "key string, value binary, topic string, partition int, offset long, "
    "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
    "producerName string, sequenceId long"
)
PARQUET_COLUMNS = [
    "key",
    "value",
    "offset",
    "publish_time",
    "event_time",
    "properties",
    "producer_name",
    "sequence_id",
]


def arrow_schema(data_type: pa.DataType | None = None) -> pa.Schema:
    fields = list(BASE_FIELDS)
    if data_type is not None:
        fields.append(pa.field("data", data_type))
    return pa.schema(fields)


def to_rows(
    table: pa.Table,
    topic: str,
    partition: int,
    data_type: pa.DataType | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """Shape a Parquet-layout table into reader rows for ``topic``/``partition``: every
    column of :func:`arrow_schema`, or only ``columns`` (names from it, in that order; a
    column not asked for is never built — ``data`` costs a JSON decode per row)."""
    full = arrow_schema(data_type)
    names = list(columns) if columns is not None else full.names
    arrays = [_column(name, table, topic, partition, data_type) for name in names]
    return pa.Table.from_arrays(arrays, schema=pa.schema([full.field(n) for n in names]))


_FROM_PARQUET = {
    "key": "key",
    "value": "value",
    "offset": "offset",
    "publishTime": "publish_time",
    "eventTime": "event_time",
    "properties": "properties",
    "producerName": "producer_name",
    "sequenceId": "sequence_id",
}


def _column(
    name: str, table: pa.Table, topic: str, partition: int, data_type: pa.DataType | None
) -> pa.Array | pa.ChunkedArray:
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), table.num_rows)
    if name == "partition":
        return pa.repeat(pa.scalar(partition, pa.int32()), table.num_rows)
    if name == "data":
        assert data_type is not None
        return decode_json(table.column("value").to_pylist(), data_type)
    return table.column(_FROM_PARQUET[name])


# -- schemas: Avro-style record definitions (JSON and AVRO topics) → Arrow / Spark -----------

_PRIMITIVES: dict[str, tuple[pa.DataType, str]] = {
    "string": (pa.string(), "string"),
    "int": (pa.int32(), "int"),
    "long": (pa.int64(), "bigint"),
    "float": (pa.float32(), "float"),
    "double": (pa.float64(), "double"),
    "boolean": (pa.bool_(), "boolean"),
    "bytes": (pa.binary(), "binary"),
}


def record_type(definition: Any) -> tuple[pa.DataType, str] | None:
    """Arrow type and Spark DDL of a record schema, or None if it is not a plain record."""
    if not isinstance(definition, dict) or definition.get("type") != "record":
        return None
    arrow_fields, ddl = [], []
    for f in definition.get("fields", []):
        mapped = _field_type(f.get("type"))
        if mapped is None:
            return None
        arrow_fields.append(pa.field(f["name"], mapped[0]))
        ddl.append(f"`{f['name']}` {mapped[1]}")
    return pa.struct(arrow_fields), f"struct<{', '.join(ddl)}>"


def _field_type(t: Any) -> tuple[pa.DataType, str] | None:
    if isinstance(t, list):  # a union: ["null", T] is a nullable T
        rest = [x for x in t if x != "null"]
        return _field_type(rest[0]) if len(rest) == 1 else None
    if isinstance(t, str):
        return _PRIMITIVES.get(t)
    if isinstance(t, dict) and t.get("type") == "record":
        return record_type(t)
    if isinstance(t, dict) and t.get("type") == "array":
        inner = _field_type(t.get("items"))
        return (pa.list_(inner[0]), f"array<{inner[1]}>") if inner else None
    if isinstance(t, dict) and isinstance(t.get("type"), str):
        return _PRIMITIVES.get(t["type"])
    return None


def decode_json(values: list[bytes | None], data_type: pa.DataType) -> pa.Array:
    """JSON-encoded values → a struct column: None where a value does not parse as a JSON
    object or does not fit ``data_type`` (a string where the schema says int, say)."""
    names = [f.name for f in data_type]
    decoded: list[dict[str, Any] | None] = []
    for raw in values:
        try:
            obj = json.loads(raw) if raw is not None else None
        except ValueError:
            obj = None
        decoded.append({k: obj.get(k) for k in names} if isinstance(obj, dict) else None)
    try:
        return pa.array(decoded, type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([_fits(d, data_type) for d in decoded], type=data_type)


def _fits(value: dict[str, Any] | None, data_type: pa.DataType) -> dict[str, Any] | None:
    try:
        pa.array([value], type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    return value
