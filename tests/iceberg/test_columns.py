"""The table rows of a segment, in process: typed columns from JSON values (Arrow's reader
for a clean block, row by row otherwise), binary values without a schema, days."""

from __future__ import annotations

import datetime
import io
import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.tier.iceberg.columns import ValueSchema, split_by_day, table_schema, to_table_rows
from magnetar.tier.parquet import SCHEMA
from tests.iceberg.rig import AT, DAY, EVENT_V1, ORDER_V1, avro, event, order

DAY_US = 86_400_000_000


def layout(values: list[bytes | None], publish_us: list[int] | None = None) -> pa.Table:
    n = len(values)
    columns = {
        "offset": pa.array(range(n), pa.int64()),
        "publish_time": pa.array(publish_us or [0] * n, pa.int64()).cast(SCHEMA.field(1).type),
        "event_time": pa.nulls(n, SCHEMA.field(2).type),
        "key": pa.array([f"k{i}" for i in range(n)]),
        "value": pa.array(values, pa.binary()),
        "properties": pa.array([[("a", "b")]] * n, SCHEMA.field(5).type),
        "producer_name": pa.array(["p"] * n),
        "sequence_id": pa.array(range(n), pa.int64()),
        "schema_version": pa.array([0] * n, pa.int64()),
        "entry_offset": pa.array(range(n), pa.int64()),
        "batch_size": pa.array([-1] * n, pa.int32()),
        "entry_format": pa.array([1] * n, pa.int8()),
    }
    return pa.table(columns, schema=SCHEMA)


JSON_SCHEMA = ValueSchema("JSON", (ORDER_V1,))


def test_clean_json_values_become_typed_columns() -> None:
    rows = to_table_rows(layout([json.dumps(order(i)).encode() for i in range(5)]), 3, JSON_SCHEMA)
    assert rows.schema == table_schema(JSON_SCHEMA)
    assert rows.select(["id", "item", "ship"]).to_pylist() == [order(i) for i in range(5)]
    assert rows.column("__partition").to_pylist() == [3] * 5
    assert rows.column("__properties").to_pylist() == [[("a", "b")]] * 5


def test_a_piece_sliced_out_of_a_segments_rows_types_its_own_values() -> None:
    """The offloader decodes a segment in pieces, slices of its rows: the block decode reads
    the slice's values where they lie in the shared buffer, not the buffer's first ones."""
    whole = layout([json.dumps(order(i)).encode() for i in range(10)])
    rows = to_table_rows(whole.slice(3, 4), 0, JSON_SCHEMA, tier_columns=True)
    assert rows.select(["id", "item", "ship"]).to_pylist() == [order(i) for i in range(3, 7)]
    assert rows.column("__value").to_pylist() == whole.column("value").to_pylist()[3:7]


def test_values_that_do_not_fit_leave_their_row_untyped_only() -> None:
    values = [
        json.dumps(order(0)).encode(),
        b"not json",
        json.dumps({**order(2), "id": "two"}).encode(),  # a string where the schema says long
        json.dumps(order(3), indent=2).encode(),  # newlines inside the value
        None,
        json.dumps({**order(5), "extra": 1}).encode(),  # fields the schema lacks are ignored
        json.dumps(order(6)).replace('"item-6"', '"\\ud800"').encode(),  # not UTF-8 text
    ]
    rows = to_table_rows(layout(values), 0, JSON_SCHEMA, tier_columns=True)
    assert rows.column("id").to_pylist() == [0, None, None, 3, None, 5, None]
    assert rows.column("__offset").to_pylist() == list(range(7))
    assert rows.column("__value").to_pylist() == values


def test_without_schema_the_value_stays_binary() -> None:
    values = [b"\x00\xff", b"", None]
    rows = to_table_rows(layout(values), 0, None)
    assert rows.column("value").to_pylist() == values
    assert rows.schema.names[-1] == "value"


def test_a_later_version_adds_its_field_at_the_end() -> None:
    v2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"]}]}
    schema = table_schema(ValueSchema("JSON", (ORDER_V1, v2)))
    assert schema.names[-4:] == ["id", "item", "ship", "note"]


def test_rows_are_cut_by_utc_day() -> None:
    times = [DAY_US - 1, DAY_US, 2 * DAY_US + 5, -1]
    days = split_by_day(to_table_rows(layout([b"x"] * 4, times), 0, None))
    assert [(day, part.column("__offset").to_pylist()) for day, part in days] == [
        (-1, [3]),
        (0, [0]),
        (1, [1]),
        (2, [2]),
    ]


def test_a_value_holding_two_objects_never_shifts_the_typed_rows() -> None:
    """Arrow's reader makes a row per object, not per line: a value holding two objects
    next to an empty value would give as many rows as values, each typed from its
    neighbour's object. Such a block goes row by row, where neither value fits."""
    two = json.dumps(order(0)) + json.dumps(order(1))
    split = [json.dumps(order(2))[:-1], "}" + json.dumps(order(3))]  # an object cut in two
    for values in ([two.encode(), b""], [s.encode() for s in split]):
        rows = to_table_rows(layout([*values, json.dumps(order(4)).encode()]), 0, JSON_SCHEMA)
        assert rows.column("id").to_pylist() == [None, None, 4]


def test_avro_logical_types_are_typed_as_the_values_they_are_stored_as() -> None:
    """fastavro hands out a datetime for a timestamp-millis field, which the column (a long,
    as the field is stored) cannot hold: such a topic failed every offload. Now the values
    read as stored; a value with bytes after it is not one of the schema's."""
    import datetime
    import decimal
    import uuid

    import fastavro

    parsed = fastavro.parse_schema(EVENT_V1)
    at = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
    ref = uuid.UUID(int=7)

    def encoded(i: int) -> bytes:
        out = io.BytesIO()
        event = {
            "id": i,
            "at": at,
            "day": datetime.date(2026, 11, 27),
            "ref": ref,
            "amount": decimal.Decimal("12.34"),
        }
        fastavro.schemaless_writer(out, parsed, event)
        return out.getvalue()

    values = [encoded(0), encoded(1) + b"\x00", encoded(2)]
    rows = to_table_rows(layout(values), 0, ValueSchema("AVRO", (EVENT_V1,)))
    typed = rows.select(["id", "at", "day", "ref", "amount"]).to_pylist()
    stored = {
        "at": int(at.timestamp() * 1000),
        "day": (datetime.date(2026, 11, 27) - datetime.date(1970, 1, 1)).days,
        "ref": str(ref),
        "amount": (1234).to_bytes(2, "big"),
    }
    assert typed == [{"id": 0, **stored}, dict.fromkeys(typed[0]), {"id": 2, **stored}]


def test_with_logical_types_avro_values_are_iceberg_dates_timestamps_and_decimals() -> None:
    """With ``logical`` (the tables this version makes), a timestamp-millis field is a
    timestamptz column (milliseconds × 1,000), a date a date, an AVRO decimal a decimal, a
    uuid a string; a value with bytes after it still leaves its row's typed columns null."""
    values = [avro(event(0)), avro(event(1)) + b"\x00", avro(event(2))]
    value_schema = ValueSchema("AVRO", (EVENT_V1,))
    rows = to_table_rows(layout(values), 0, value_schema, logical=True)
    assert rows.schema == table_schema(value_schema, logical=True)
    names = ["id", "at", "day", "ref", "amount"]
    assert [rows.schema.field(n).type for n in names] == [
        pa.int64(),
        pa.timestamp("us", tz="UTC"),
        pa.date32(),
        pa.string(),
        pa.decimal128(9, 2),
    ]
    typed = rows.select(names).to_pylist()
    sent = [{**event(i), "ref": str(event(i)["ref"])} for i in (0, 2)]
    assert typed == [sent[0], dict.fromkeys(names), sent[1]]


def test_with_logical_types_json_timestamps_and_dates_are_typed_out_of_range_null() -> None:
    """JSON values hold timestamps as numbers: milliseconds × 1,000, and one beyond what
    microseconds can count is null (not wrapped). JSON has no decimal bytes: such a field
    keeps the stored type."""
    value_schema = ValueSchema("JSON", (EVENT_V1,))
    ms, days = int(AT.timestamp() * 1000), (DAY - datetime.date(1970, 1, 1)).days
    values = [
        {"id": 1, "at": ms, "day": days, "ref": "r", "amount": None},
        {"id": 2, "at": 2**62, "day": 1, "ref": "s", "amount": None},
    ]
    rows = to_table_rows(
        layout([json.dumps(v).encode() for v in values]), 0, value_schema, logical=True
    )
    assert rows.schema.field("amount").type == pa.binary()
    assert rows.select(["id", "at", "day"]).to_pylist() == [
        {"id": 1, "at": AT, "day": DAY},
        {"id": 2, "at": None, "day": datetime.date(1970, 1, 2)},
    ]


def test_a_logical_type_a_later_version_changes_keeps_the_first() -> None:
    """A column cannot change type: when a later version gives a field stored the same way
    another logical type (or none), the first version's stays."""
    plain = {"type": "record", "name": "E", "fields": [{"name": "at", "type": "long"}]}
    stamped = {
        "type": "record",
        "name": "E",
        "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
    }
    first_plain = ValueSchema("AVRO", (plain, stamped)).logical_record
    first_stamped = ValueSchema("AVRO", (stamped, plain)).logical_record
    assert first_plain is not None and first_plain.field("at").type == pa.int64()
    assert first_stamped is not None
    assert first_stamped.field("at").type == pa.timestamp("ms", tz="UTC")


NESTED_V1 = {
    "type": "record",
    "name": "Nested",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [{"name": "zip", "type": "int"}, {"name": "ok", "type": "boolean"}],
            },
        },
    ],
}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "id": st.integers(-(2**63), 2**63 - 1),
                    "tags": st.lists(st.text(max_size=5), max_size=3),
                    "note": st.one_of(st.none(), st.text(max_size=5)),
                    "raw": st.binary(max_size=5),
                    "at": st.integers(0, 2**50),
                    "ship": st.fixed_dictionaries(
                        {"zip": st.integers(-(2**31), 2**31 - 1), "ok": st.booleans()}
                    ),
                }
            ),
            st.binary(max_size=20),
            st.none(),
        ),
        max_size=20,
    )
)
def test_any_avro_values_decode_without_failing(
    values: list[dict[str, Any] | bytes | None],
) -> None:
    """Events of the schema are typed as written; random bytes and nulls never fail the
    decode (typed columns null where the bytes are not one of the schema's values)."""
    import fastavro

    parsed = fastavro.parse_schema(_plain_schema(NESTED_V1))

    def encoded(value: dict[str, Any] | bytes | None) -> bytes | None:
        if not isinstance(value, dict):
            return value
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, value)
        return out.getvalue()

    rows = to_table_rows(layout([encoded(v) for v in values]), 0, ValueSchema("AVRO", (NESTED_V1,)))
    typed = rows.select(["id", "tags", "note", "raw", "at", "ship"]).to_pylist()
    for value, row in zip(values, typed, strict=True):
        if isinstance(value, dict):
            assert row == value
        elif value is None:
            assert row == dict.fromkeys(row)


def _plain_schema(definition: Any) -> Any:
    if isinstance(definition, dict):
        return {k: _plain_schema(v) for k, v in definition.items() if k != "logicalType"}
    return [_plain_schema(d) for d in definition] if isinstance(definition, list) else definition
