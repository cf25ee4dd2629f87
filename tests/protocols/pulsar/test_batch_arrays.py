"""Many batches split at once (numpy, Arrow): for every batch it splits, exactly what
``split_columns`` gives; every batch it declines, ``split_columns`` reads (or refuses)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch_arrays import SplitBatches, split_batches
from magnetar.protocols.pulsar.batch_columns import BatchColumns, split_columns
from magnetar.protocols.pulsar.errors import BatchFormatError
from tests.protocols.pulsar.test_batch_columns import (
    U64,
    batch_of,
    batches,
    field_bytes,
    known,
    single,
    varint,
)


def as_columns(split: SplitBatches, counts: list[int]) -> list[BatchColumns | None]:
    """The split's rows cut back into one BatchColumns per batch (None: not split)."""
    values, keys = split.values.to_pylist(), split.keys.to_pylist()
    props = [dict(p) for p in split.properties.to_pylist()]
    times, seqs = split.event_times.to_pylist(), split.sequence_ids.to_pylist()
    out: list[BatchColumns | None] = []
    row = 0
    for fast, count in zip(split.fast.tolist(), counts, strict=True):
        if not fast:
            out.append(None)
            continue
        cut = slice(row, row + count)
        out.append(BatchColumns(values[cut], keys[cut], props[cut], times[cut], seqs[cut]))
        row += count
    assert row == len(values) == len(keys) == len(props) == len(times) == len(seqs)
    return out


def check(datas: list[bytes], counts: list[int], firsts: list[int]) -> SplitBatches:
    split = split_batches(datas, counts, firsts, min_batches=1)
    assert split.values.type == pa.binary() and split.keys.type == pa.string()
    for data, count, first, got in zip(
        datas, counts, firsts, as_columns(split, counts), strict=True
    ):
        if got is not None:
            assert got == split_columns(data, count, first)
    return split


# Where the split must decline: sequence ids and event times the tier's int64 columns cannot
# hold (split_columns reads them, the table then refuses them), a name twice in a message.
edge_fields = st.one_of(
    st.integers(2**63 - 5, U64 - 1).map(lambda s: known(sequence_id=s)),
    st.integers(2**53, U64 - 1).map(lambda t: known(event_time=t)),
    st.just(known(properties=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="a", value="2")])),
    st.just(known(properties=[pb.KeyValue(key="a" * 130, value="long name")])),
)


@st.composite
def many_batches(draw: st.DrawFn) -> tuple[list[bytes], list[int], list[int]]:
    items = draw(st.lists(batches, min_size=1, max_size=8))
    datas = [data for data, _ in items]
    counts = [count + draw(st.sampled_from([0, 0, 0, 0, -1, 1])) for _, count in items]
    if draw(st.booleans()):  # one batch with an edge field in one of its messages
        i = draw(st.integers(0, len(datas) - 1))
        extra = draw(edge_fields)
        datas[i] = single(known(payload_size=1) + extra, b"x") + datas[i]
        counts[i] += 1
    firsts = draw(st.lists(st.integers(0, U64 - 1), min_size=len(items), max_size=len(items)))
    return datas, counts, firsts


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(many_batches())
def test_split_batches_are_split_columns(batches: tuple[list[bytes], list[int], list[int]]) -> None:
    check(*batches)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(many_batches(), st.data())
def test_damaged_batches_are_declined_or_split_alike(
    batches: tuple[list[bytes], list[int], list[int]], data: st.DataObject
) -> None:
    datas, counts, firsts = batches
    i = data.draw(st.integers(0, len(datas) - 1))
    raw = datas[i]
    if raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        if data.draw(st.booleans()):
            raw = raw[:at]
        else:
            raw = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    datas[i] = raw
    check(datas, counts, firsts)


def client_batch(n: int, first: int) -> bytes:
    """What the clients write: keys, properties, event times, sequence ids, null values."""
    items = []
    for i in range(n):
        value = b"" if i % 7 == 0 else f"value-{first + i}".encode() * (i % 3 + 1)
        metadata = pb.SingleMessageMetadata(
            payload_size=len(value),
            partition_key=f"key-{i % 5}" if i % 4 else "",
            event_time=1_700_000_000_000 + i,
            sequence_id=first + i,
            null_value=i % 7 == 0,
            properties=[pb.KeyValue(key=f"p{j}", value="ключ" * j) for j in range(i % 3)],
        )
        if i % 4 == 0:
            metadata.ClearField("partition_key")
        if i % 5 == 0:
            metadata.ClearField("event_time")
            metadata.ClearField("sequence_id")
        items.append((metadata.SerializeToString(), value))
    return batch_of(items)


def test_what_clients_write_is_split_here() -> None:
    datas = [client_batch(10 + i % 9, i * 100) for i in range(40)]
    counts = [10 + i % 9 for i in range(40)]
    split = check(datas, counts, [i * 100 for i in range(40)])
    assert split.fast.all()
    assert split.keys.null_count > 0 and split.event_times.null_count > 0


def test_few_batches_are_left_to_split_columns() -> None:
    """Below min_batches a step costs more per message than the Python reader."""
    datas = [client_batch(5, 0)] * 3
    assert not split_batches(datas, [5] * 3, [0] * 3).fast.any()
    assert split_batches(datas, [5] * 3, [0] * 3, min_batches=3).fast.all()


def test_a_long_batch_among_short_ones_is_finished_by_split_columns() -> None:
    datas = [client_batch(3, 0)] * 40 + [client_batch(200, 0)]
    split = split_batches(datas, [3] * 40 + [200], [0] * 41, min_batches=32)
    assert split.fast.tolist() == [True] * 40 + [False]
    check(datas, [3] * 40 + [200], [0] * 41)


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param(field_bytes(2, 2, b"\xff\xfe") + known(payload_size=1), id="key-not-utf8"),
        pytest.param(
            known(payload_size=1)
            + field_bytes(1, 2, field_bytes(1, 2, b"k") + field_bytes(2, 2, b"\xc3")),
            id="property-not-utf8",
        ),
        pytest.param(field_bytes(12, 0, 5) + known(payload_size=1), id="unknown-field"),
        pytest.param(b"\x18" + varint(2**32 + 1), id="size-over-int32"),
    ],
)
def test_unusual_batches_are_declined(metadata: bytes) -> None:
    datas = [single(metadata, b"x"), client_batch(4, 0)]
    split = check(datas, [1, 4], [0, 0])
    assert split.fast.tolist() == [False, True]


def test_declined_batches_still_fail_in_split_columns() -> None:
    cut = client_batch(4, 0)[:-1]
    split = check([cut, client_batch(4, 0)], [4, 4], [0, 0])
    assert split.fast.tolist() == [False, True]
    with pytest.raises(BatchFormatError):
        split_columns(cut, 4, 0)


def test_sizes_are_read_big_endian() -> None:
    meta = known(payload_size=300)
    data = struct.pack(">I", len(meta)) + meta + b"v" * 300
    split = check([data, data], [1, 1], [0, 0])
    assert split.values.to_pylist() == [b"v" * 300] * 2
