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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

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
_NEWLINE = 0x0A
_OPEN, _CLOSE = ord("{"), ord("}")
_JSON_BLOCK = 4 << 20  # Arrow parses blocks of this many bytes on its threads
_ROWS_BY_ROW = 4096  # a block the reader refuses is decoded row by row from this size down
_PARTS = 16  # ...and above it, cut in this many parts, each tried again
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
        return decode_json_values(table.column("value"), data_type)
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


# Avro logical types as the Arrow types of the values in the unit they are stored in (a
# timestamp-millis field holds milliseconds); ``iceberg_type`` widens them to microseconds
_LOGICAL: dict[tuple[str, str], tuple[pa.DataType, str]] = {
    ("int", "date"): (pa.date32(), "date"),
    ("int", "time-millis"): (pa.time32("ms"), "bigint"),  # Spark has no time type
    ("long", "time-micros"): (pa.time64("us"), "bigint"),
    ("long", "timestamp-millis"): (pa.timestamp("ms", tz="UTC"), "timestamp"),
    ("long", "timestamp-micros"): (pa.timestamp("us", tz="UTC"), "timestamp"),
    ("long", "local-timestamp-millis"): (pa.timestamp("ms"), "timestamp_ntz"),
    ("long", "local-timestamp-micros"): (pa.timestamp("us"), "timestamp_ntz"),
}
MAX_DECIMAL_PRECISION = 38  # Iceberg's


def record_type(
    definition: Any, *, logical: bool = False, decimals: bool = False
) -> tuple[pa.DataType, str] | None:
    """Arrow type and Spark DDL of a record schema, or None if it is not a plain record.
    Each field has the type its values are stored as (a ``timestamp-millis`` field is a
    long), or with ``logical`` the type its logical type names (dates, times, timestamps;
    with ``decimals`` too, decimals on bytes: only Avro stores them as bytes)."""
    if not isinstance(definition, dict) or definition.get("type") != "record":
        return None
    arrow_fields, ddl = [], []
    for f in definition.get("fields", []):
        mapped = _field_type(f.get("type"), logical, decimals)
        if mapped is None:
            return None
        arrow_fields.append(pa.field(f["name"], mapped[0]))
        ddl.append(f"`{f['name']}` {mapped[1]}")
    return pa.struct(arrow_fields), f"struct<{', '.join(ddl)}>"


def _field_type(t: Any, logical: bool, decimals: bool) -> tuple[pa.DataType, str] | None:
    if isinstance(t, list):  # a union: ["null", T] is a nullable T
        rest = [x for x in t if x != "null"]
        return _field_type(rest[0], logical, decimals) if len(rest) == 1 else None
    if isinstance(t, str):
        return _PRIMITIVES.get(t)
    if isinstance(t, dict) and t.get("type") == "record":
        return record_type(t, logical=logical, decimals=decimals)
    if isinstance(t, dict) and t.get("type") == "array":
        inner = _field_type(t.get("items"), logical, decimals)
        return (pa.list_(inner[0]), f"array<{inner[1]}>") if inner else None
    if isinstance(t, dict) and isinstance(t.get("type"), str):
        if logical and (found := _logical_type(t, decimals)) is not None:
            return found
        return _PRIMITIVES.get(t["type"])
    return None


def _logical_type(t: dict[str, Any], decimals: bool) -> tuple[pa.DataType, str] | None:
    kind = t.get("logicalType")
    if not isinstance(kind, str):
        return None
    if kind == "decimal" and decimals and t["type"] == "bytes":
        precision, scale = t.get("precision"), t.get("scale", 0)
        if (
            isinstance(precision, int)
            and isinstance(scale, int)
            and 0 < precision <= MAX_DECIMAL_PRECISION
            and 0 <= scale <= precision
        ):
            return pa.decimal128(precision, scale), f"decimal({precision},{scale})"
        return None
    return _LOGICAL.get((t["type"], kind))


def iceberg_type(t: pa.DataType) -> pa.DataType:
    """``t`` with milliseconds widened to microseconds, the only unit Iceberg has."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(iceberg_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(iceberg_type(t.value_type))
    if pa.types.is_timestamp(t) and t.unit == "ms":
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_time32(t):
        return pa.time64("us")
    return t


def as_logical(array: pa.Array, stored: pa.DataType) -> pa.Array:
    """``array``, decoded with the types its values are stored as, as the Iceberg types of
    ``stored`` (the same record with logical types, in the stored units): integers become
    dates, times and timestamps (milliseconds × 1,000), Avro decimal bytes (the unscaled
    value, big-endian two's complement) decimals. A value that does not fit (out of range,
    too many digits) becomes null."""
    if array.type == iceberg_type(stored):
        return array
    if pa.types.is_struct(stored):
        children = [
            as_logical(child, f.type) for child, f in zip(array.flatten(), stored, strict=True)
        ]
        fields = [f.with_type(c.type) for c, f in zip(children, stored, strict=True)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    if pa.types.is_list(stored):
        items = as_logical(array.values, stored.value_type)
        return pa.ListArray.from_arrays(array.offsets, items, mask=array.is_null())
    if pa.types.is_decimal(stored):
        return _decimals(array, stored)
    if (pa.types.is_timestamp(stored) and stored.unit == "ms") or pa.types.is_time32(stored):
        array = _times_1000(array.cast(pa.int64()))
    return array.cast(iceberg_type(stored))


def _times_1000(ints: pa.Array) -> pa.Array:
    try:
        return pc.multiply_checked(ints, 1000)
    except pa.ArrowInvalid:  # beyond ±292,000 years in microseconds: null
        limit = (1 << 63) // 1000
        fitting = [v if v is not None and -limit <= v < limit else None for v in ints.to_pylist()]
        return pa.array([None if v is None else v * 1000 for v in fitting], pa.int64())


def _decimals(array: pa.Array, t: pa.Decimal128Type) -> pa.Array:
    import decimal

    bound = 10**t.precision
    exact = decimal.Context(prec=MAX_DECIMAL_PRECISION + 1)
    out: list[decimal.Decimal | None] = []
    for raw in array.to_pylist():
        unscaled = int.from_bytes(raw, "big", signed=True) if raw is not None else bound
        fits = -bound < unscaled < bound  # a null value counts as ``bound``: null again
        out.append(decimal.Decimal(unscaled).scaleb(-t.scale, exact) if fits else None)
    return pa.array(out, type=t)


def decode_json_values(values: pa.Array | pa.ChunkedArray, data_type: pa.DataType) -> pa.Array:
    """:func:`decode_json` of a binary column: parsed by Arrow's JSON reader where that is
    exact (every value one object on one line, each fitting), row by row elsewhere. Null
    values (tombstones) are set aside first: their rows are null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    if not isinstance(data_type, pa.StructType):
        return decode_json(values.to_pylist(), data_type)
    if not values.null_count:
        return _decode_parts(values, data_type)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    present = values.filter(pa.array(valid))
    decoded = _decode_parts(present, data_type)
    where = np.cumsum(valid) - 1
    return decoded.take(pa.array(where, pa.int64(), mask=~valid))


def _decode_parts(values: pa.Array, record: pa.StructType) -> pa.Array:
    fast = _decode_json_block(values, record)
    return fast if fast is not None else _decode_refused(values, record)


def _decode_refused(values: pa.Array, record: pa.StructType) -> pa.Array:
    """A block Arrow's reader refused (a value in it does not fit): cut in :data:`_PARTS`,
    each part read again, and the parts refused again cut again; one of at most
    :data:`_ROWS_BY_ROW` rows, or whose parts are all refused (such values everywhere),
    is decoded row by row. A read costs some 300 µs plus 0.5 µs a row, the row path 10 µs a
    row: a few such values among many cost a few reads, not a Python decode of every row,
    and many cost the row path and one round of refused reads (bench/json_values.py
    measured 0.6-1.1x the row path's speed with 100 or 1,000 such values in 100,000)."""
    if len(values) <= _ROWS_BY_ROW:
        return decode_json(values.to_pylist(), record)
    step = -(-len(values) // _PARTS)
    parts = [values.slice(at, step) for at in range(0, len(values), step)]
    read = [_decode_json_block(part, record) for part in parts]
    if all(r is None for r in read):
        return decode_json(values.to_pylist(), record)
    return pa.concat_arrays(
        [
            r if r is not None else _decode_refused(p, record)
            for p, r in zip(parts, read, strict=True)
        ]
    )


def decode_json(values: list[bytes | None], data_type: pa.DataType) -> pa.Array:
    """JSON-encoded values → a struct column: None where a value does not parse as a JSON
    object or does not fit ``data_type``. Fitting is what Arrow's JSON reader accepts: a
    string where the schema says long, a number with a fraction or an exponent where it
    says int, a string where it says array, text that is not UTF-8 (a lone surrogate
    escape) — none fits, where ``pa.array`` alone would bend some (``"ab"`` → ``["a",
    "b"]``, ``5.5`` → ``5``) and fail on others."""
    names = [f.name for f in data_type]
    fits = _checker(data_type)
    decoded: list[dict[str, Any] | None] = []
    for raw in values:
        try:
            obj = json.loads(raw.decode()) if raw is not None else None  # UTF-8 only, as Arrow
        except ValueError:
            obj = None
        row = {k: obj.get(k) for k in names} if isinstance(obj, dict) else None
        decoded.append(row if row is not None and fits(row) else None)
    try:
        return pa.array(decoded, type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeError):
        return pa.array([row_or_none(d, data_type) for d in decoded], type=data_type)


def row_or_none(value: dict[str, Any] | None, data_type: pa.DataType) -> dict[str, Any] | None:
    """``value`` if Arrow takes it as a ``data_type`` row, else None."""
    try:
        pa.array([value], type=data_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeError):
        return None
    return value


def _checker(data_type: pa.DataType) -> Callable[[Any], bool]:
    """Whether a value ``json.loads`` made fits ``data_type`` (None fits every type). Types
    a record schema never maps to are left to ``pa.array``."""
    if pa.types.is_struct(data_type):
        fields = [(f.name, _checker(f.type)) for f in data_type]
        return lambda v: (
            v is None or (isinstance(v, dict) and all(fits(v.get(name)) for name, fits in fields))
        )
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        item = _checker(data_type.value_type)
        return lambda v: v is None or (isinstance(v, list) and all(item(x) for x in v))
    if pa.types.is_integer(data_type):
        bits = data_type.bit_width
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if pa.types.is_unsigned_integer(data_type):
            low, high = 0, (1 << bits) - 1
        return lambda v: v is None or (type(v) is int and low <= v <= high)
    if pa.types.is_floating(data_type):
        return lambda v: v is None or type(v) in (int, float)
    if pa.types.is_boolean(data_type):
        return lambda v: v is None or type(v) is bool
    if (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
    ):
        return lambda v: v is None or (type(v) is str and (v.isascii() or _utf8(v)))
    return lambda v: True


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: JSON's \ud800 escape, say
        return False
    return True


def _decode_json_block(array: pa.Array, record: pa.StructType) -> pa.StructArray | None:
    """Every value parsed at once by Arrow's JSON reader (one object per line), or None when
    that cannot be exact: a null value, a newline inside a value, or any value that is not
    an object fitting ``record`` — the per-row path then decides row by row."""
    if len(array) == 0 or array.null_count or not _one_object_each(array):
        return None
    one_list = pa.ListArray.from_arrays(pa.array([0, len(array)], pa.int32()), array)
    data = pc.binary_join(one_list, pa.scalar(b"\n"))[0].as_buffer()
    if np.count_nonzero(np.frombuffer(data, np.uint8) == _NEWLINE) != len(array) - 1:
        return None  # a newline inside a value: one line is not one value
    options = pj.ParseOptions(
        explicit_schema=pa.schema(list(record)), unexpected_field_behavior="ignore"
    )
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=_JSON_BLOCK),  # blocks: in parallel
            parse_options=options,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(array):
        return None
    columns = [table.column(f.name).combine_chunks() for f in record]
    return pa.StructArray.from_arrays(columns, fields=list(record))


def _one_object_each(array: pa.Array) -> bool:
    """True when every value starts with ``{`` and ends with ``}``. Arrow's reader makes a row
    per object, not per line; joined by newlines (which no JSON string holds), such values
    meet only at the top level (``}`` then ``{`` is valid nowhere else), so each is one or
    more whole objects, and as many rows as values means exactly one object each. Without
    this, a value of two objects beside an empty one would shift every later typed row."""
    width = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buf, data_buf = array.buffers()
    if data_buf is None or data_buf.size == 0:
        return False  # every value empty
    offsets = np.frombuffer(offsets_buf, width)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buf, np.uint8)
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    if bool((ends <= starts).any()):
        return False  # an empty value
    return bool((data[starts] == _OPEN).all() and (data[ends - 1] == _CLOSE).all())
