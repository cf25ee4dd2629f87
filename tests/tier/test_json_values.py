"""Typed values from JSON: what fits a record type is what Arrow's JSON reader accepts, on
the block path and row by row alike, and nothing a producer sends makes the decode fail."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.tier import rows
from magnetar.tier.rows import decode_json, decode_json_values

RECORD = pa.struct(
    [
        pa.field("id", pa.int64()),
        pa.field("n", pa.int32()),
        pa.field("price", pa.float64()),
        pa.field("ok", pa.bool_()),
        pa.field("item", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("ship", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())])),
    ]
)
NOTHING = dict.fromkeys(RECORD.names)


@pytest.mark.parametrize(
    "value",
    [
        '{"tags": "ab"}',  # pa.array alone: ["a", "b"]
        '{"id": 5.5}',  # pa.array alone: 5
        '{"id": 5.0}',
        '{"id": 1e3}',
        '{"id": true}',
        '{"id": 9223372036854775808}',
        '{"n": 3000000000}',
        '{"price": "1.5"}',
        '{"price": false}',
        '{"ok": 1}',
        '{"item": 5}',
        '{"item": {"a": 1}}',
        '{"item": "\\ud800"}',  # a lone surrogate: pa.array alone raises UnicodeEncodeError
        '{"tags": ["x", "\\udc00"]}',
        '{"ship": "x"}',
        '{"ship": {"zip": "7"}}',
        "[1, 2]",
        "not json",
    ],
)
def test_a_value_that_does_not_fit_leaves_its_row_null_on_both_paths(value: str) -> None:
    good = {**NOTHING, "id": 1, "tags": ["x"], "ship": {"city": "c", "zip": 2}}
    values = [json.dumps(good).encode(), value.encode()]
    assert decode_json(values, RECORD).to_pylist() == [good, None]
    assert decode_json_values(pa.array(values, pa.binary()), RECORD).to_pylist() == [good, None]


def test_what_fits_reads_the_same_on_the_block_path_and_row_by_row() -> None:
    values = [
        '{"id": -9223372036854775808, "n": -2147483648, "price": 5, "ok": false}',
        '{"item": "é \\u00e9 \\ud83d\\ude00", "raw": "abc", "tags": [], "ship": {"zip": 0}}',
        '{"price": 1.5e3, "tags": [null, "t"], "ship": null, "extra": [1, {"x": 2}]}',
        "{}",
    ]
    raw = [v.encode() for v in values]
    block = decode_json_values(pa.array(raw, pa.binary()), RECORD)
    rows = decode_json(raw, RECORD)
    assert block.to_pylist() == rows.to_pylist()
    assert rows.to_pylist()[0]["price"] == 5.0
    assert rows.to_pylist()[1]["item"] == "é é 😀"
    assert rows.to_pylist()[1]["raw"] == b"abc"
    assert rows.to_pylist()[2]["tags"] == [None, "t"]


def test_null_values_and_an_empty_column_decode_row_by_row() -> None:
    assert decode_json_values(pa.array([None, b'{"id": 3}'], pa.binary()), RECORD).to_pylist() == [
        None,
        {**NOTHING, "id": 3},
    ]
    assert len(decode_json_values(pa.chunked_array([], pa.binary()), RECORD)) == 0
    assert decode_json_values(pa.array([None, None], pa.binary()), RECORD).to_pylist() == [None] * 2


@pytest.mark.parametrize("bad_rows", [[0], [299], [150], [3, 64, 65, 200], list(range(0, 300, 7))])
def test_values_that_do_not_fit_among_many_leave_only_their_rows_null(
    bad_rows: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow's reader refuses a block with one bad value: the block is cut until the good
    parts read as blocks, and each bad value still types only its own row. (Parts made
    small, so that 300 values are cut three times over.)"""
    monkeypatch.setattr(rows, "_ROWS_BY_ROW", 8)
    monkeypatch.setattr(rows, "_PARTS", 4)
    reads: list[int] = []
    real_read = rows._decode_json_block

    def counted(values: pa.Array, record: pa.StructType) -> pa.StructArray | None:
        reads.append(len(values))
        return real_read(values, record)

    monkeypatch.setattr(rows, "_decode_json_block", counted)
    values: list[bytes | None] = [
        json.dumps({"id": i, "tags": [str(i)], "ship": {"zip": i}}).encode() for i in range(300)
    ]
    for i in bad_rows:
        values[i] = None if i % 3 == 1 else b'{"id": "%d"}' % i
    got = decode_json_values(
        pa.chunked_array([pa.array(values[:100]), pa.array(values[100:])]), RECORD
    )
    assert got.to_pylist() == decode_json(values, RECORD).to_pylist()
    assert [i for i, row in enumerate(got.to_pylist()) if row is None] == bad_rows
    assert got.type == RECORD
    assert len(reads) > 1  # cut, not decoded row by row whole


_TEXT = st.one_of(st.text(max_size=8), st.sampled_from(["\ud800", "a\udc00b", "\n", "é"]))
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        _TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(RECORD.names), inner)
    ),
    max_leaves=6,
)
_VALUE = st.one_of(
    st.fixed_dictionaries({}, optional={name: _JSON for name in RECORD.names}).map(
        lambda obj: json.dumps(obj).encode()
    ),
    _JSON.map(lambda obj: json.dumps(obj).encode()),
    st.binary(max_size=12),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUE, max_size=40))
def test_any_values_decode_without_failing_and_alike_on_both_paths(
    values: list[bytes | None],
) -> None:
    """Whatever a producer sends, the typed decode never raises (one that did failed its
    segment's offload on every retry), and the block path, cut into parts of two, types
    each row as the row path does."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows, "_ROWS_BY_ROW", 2)
        patch.setattr(rows, "_PARTS", 2)
        got = decode_json_values(pa.array(values, pa.binary()), RECORD)
    assert got.to_pylist() == decode_json(values, RECORD).to_pylist()
    assert got.type == RECORD and len(got) == len(values)
