"""The Parquet layout's codec: ``entries_to_table`` and ``table_to_entries`` give exactly what
the row-by-row path gives (``formats.unpack`` / ``formats.pack`` of MessageRows, kept here as
the reference), errors included, for every entry format."""

from __future__ import annotations

import io
import itertools
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import magnetar.protocols.kafka.entry_format  # registers the KAFKA format
import magnetar.protocols.pulsar.entry_format  # noqa: F401  (registers the PULSAR format)
from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.core.formats import MessageRow
from magnetar.protocols.kafka import records
from magnetar.protocols.pulsar import batch_arrays, compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, build_batch
from magnetar.protocols.pulsar.errors import BatchFormatError, CompressionError
from magnetar.protocols.pulsar.frames import pack_payload
from magnetar.tier import UnsupportedEntryFormatError
from magnetar.tier.parquet import SCHEMA, entries_to_table, entry_boundaries, table_to_entries
from tests.tier.rig import batch_size, publish_time, pulsar_entry


@pytest.fixture(autouse=True, scope="module", params=["numpy split", "python split"])
def splitter(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test twice: with the batches of any run split together (numpy; entries it
    declines split one by one) and with every batch split one by one (what a segment of
    fewer than MIN_BATCHES batches gets)."""
    default = batch_arrays.MIN_BATCHES
    batch_arrays.MIN_BATCHES = 1 if request.param == "numpy split" else 1 << 60
    yield
    batch_arrays.MIN_BATCHES = default


# -- the row-by-row path, as the reference ------------------------------------------------------


def reference_table(entries: Iterable[Entry]) -> pa.Table:
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for entry in entries:
        try:
            rows = formats.unpack(entry.format, entry.payload)
        except formats.UnknownFormatError as e:
            raise UnsupportedEntryFormatError(f"entry at offset {entry.base_offset}: {e}") from None
        if len(rows) != entry.count:
            raise UnsupportedEntryFormatError(
                f"entry at offset {entry.base_offset} counts {entry.count} messages but its "
                f"format-{entry.format} payload holds {len(rows)}: offsets would not survive"
            )
        n, base = len(rows), entry.base_offset
        cols["offset"] += range(base, base + n)
        cols["publish_time"] += [entry.publish_time * 1000] * n
        cols["event_time"] += [r.event_time * 1000 if r.event_time >= 0 else None for r in rows]
        cols["key"] += [r.key for r in rows]
        cols["value"] += [r.value for r in rows]
        cols["properties"] += [list(r.properties.items()) for r in rows]
        cols["producer_name"] += [r.producer_name or None for r in rows]
        cols["sequence_id"] += [r.sequence_id if r.sequence_id >= 0 else None for r in rows]
        cols["schema_version"] += [r.schema_version for r in rows]
        cols["entry_offset"] += [base] * n
        cols["batch_size"] += [r.batch_size for r in rows]
        cols["entry_format"] += [entry.format] * n
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def reference_entries(table: pa.Table, segment_id: int) -> Iterator[Entry]:
    data = {
        name: (col.cast(pa.int64()) if pa.types.is_timestamp(col.type) else col).to_pylist()
        for name, col in zip(table.column_names, table.columns, strict=True)
    }
    rows = [
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
            *(
                data[c]
                for c in (
                    "value",
                    "key",
                    "properties",
                    "event_time",
                    "producer_name",
                    "sequence_id",
                    "schema_version",
                    "batch_size",
                )
            ),
            strict=True,
        )
    ]
    starts, times, fmts = data["entry_offset"], data["publish_time"], data["entry_format"]
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and starts[j] == starts[i]:
            j += 1
        publish_ms = times[i] // 1000
        payload = formats.pack(fmts[i], rows[i:j], publish_ms)
        event = max(r.event_time for r in rows[i:j])
        yield Entry(starts[i], j - i, publish_ms, event, fmts[i], payload, segment_id)
        i = j


def outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as e:
        return (type(e), str(e))


def same_table(entries: list[Entry]) -> pa.Table:
    table = entries_to_table(entries)
    expected = reference_table(entries)
    assert table.equals(expected, check_metadata=True)
    assert table.schema == SCHEMA
    return table


def same_entries(table: pa.Table) -> list[Entry]:
    rebuilt = list(table_to_entries(table, 7))
    assert rebuilt == list(reference_entries(table, 7))
    return rebuilt


# -- entries of every format ----------------------------------------------------------------------


def pulsar_batch(
    first: int,
    rows: list[tuple[bytes, str | None, dict[str, str], int | None, int | None]],
    *,
    codec: int = compression.NONE,
    schema_version: int | None = None,
    producer: str = "producer",
) -> Entry:
    """An entry of one Pulsar batch of ``rows`` (value, key, properties, event time, sequence)."""
    messages = []
    for value, key, props, event_time, sequence_id in rows:
        single = pb.SingleMessageMetadata(
            partition_key=key,
            event_time=event_time,
            sequence_id=sequence_id,
            properties=[pb.KeyValue(key=k, value=v) for k, v in props.items()],
        )
        messages.append(BatchedMessage(single, value))
    data = build_batch(messages)
    metadata = pb.MessageMetadata(
        producer_name=producer,
        sequence_id=first,
        publish_time=1,
        num_messages_in_batch=len(rows),
        compression=codec,  # type: ignore[arg-type]
        uncompressed_size=len(data),
    )
    if schema_version is not None:
        metadata.schema_version = struct.pack(">q", schema_version)
    payload = pack_payload(metadata, compression.compress(codec, data))
    return Entry(first, len(rows), 1_700_000_000_000 + first, -1, formats.PULSAR, payload)


def kafka_entry(first: int, count: int, producer_id: int = -1) -> Entry:
    batch = [
        records.Record(
            key=f"k{i}".encode() if i % 2 else None,
            value=f"value-{i}".encode(),
            timestamp=1_700_000_000_000 + i,
            headers=(("h", b"x"),) if i % 3 else (),
        )
        for i in range(count)
    ]
    payload = records.encode(
        batch,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=5 if producer_id >= 0 else -1,
    )
    return Entry(first, count, 1_700_000_000_000, -1, formats.KAFKA, payload)


def mixed_entries() -> list[Entry]:
    """Pulsar batches (every codec, schema versions, duplicate property names, keys that need
    two-byte lengths) and single messages, Kafka batches and RAW entries, in one run."""
    entries: list[Entry] = []
    for i in range(6):  # the tiered tests' stream: single messages and batches of 1-3
        size = batch_size(i)
        entries.append(
            Entry(
                len(entries) * 10,
                max(size, 1),
                publish_time(i),
                -1,
                formats.PULSAR,
                pulsar_entry(i, size),
            )
        )
    offset = 1000
    for codec in compression.CODECS:
        rows = [
            (f'{{"id":{j:06d}}}'.encode(), f"user-{j}" * (j % 40), {"a": str(j)}, 5 + j, j)
            for j in range(50)
        ]
        entries.append(pulsar_batch(offset, rows, codec=codec, schema_version=codec - 3))
        offset += 50
    entries.append(pulsar_batch(offset, [(b"", None, {}, None, None)] * 3, producer=""))
    entries.append(kafka_entry(offset + 3, 5))
    entries.append(kafka_entry(offset + 8, 4, producer_id=17))
    entries.append(Entry(offset + 12, 1, 5, -1, formats.RAW, b"raw bytes"))
    return entries


def test_every_format_gives_the_rows_of_the_row_by_row_path() -> None:
    table = same_table(mixed_entries())
    rebuilt = same_entries(table)
    assert entries_to_table(rebuilt).equals(table)


def test_no_entries_give_an_empty_table_and_back() -> None:
    table = same_table([])
    assert table.num_rows == 0
    assert same_entries(table) == []


def test_tables_in_pieces_and_read_back_from_parquet() -> None:
    """Several chunks, slices that cut entries, and Parquet row groups: same entries."""
    table = entries_to_table(mixed_entries())
    same_entries(pa.concat_tables([table.slice(0, 7), table.slice(7, 100), table.slice(107)]))
    for start, length in [(3, 20), (9, 1), (150, 200), (table.num_rows - 2, 2)]:
        same_entries(table.slice(start, length))
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=33)
    parquet = pq.ParquetFile(io.BytesIO(sink.getvalue()))
    for group in range(parquet.num_row_groups):
        same_entries(parquet.read_row_group(group))


def test_tables_written_elsewhere_with_nulls_and_times_before_1970() -> None:
    """Null maps and values in maps, times before 1970, missing ids: as the rows had them."""
    rows: dict[str, list[Any]] = {
        "offset": [0, 1, 2, 3, 4],
        "publish_time": [5_000, 5_000, 5_000, -7_000, 9_000],
        "event_time": [-5_000, None, -1_500, 2_000, -500],
        "key": ["a", None, "c", "d", None],
        "value": [b"1", b"2", b"3", b"4", b"5"],
        "properties": [None, [("k", "v"), ("k", "w")], [], [("x", "y")], None],
        "producer_name": ["p", "q", None, None, ""],
        "sequence_id": [None, 4, -3, 8, None],
        "schema_version": [None, 1, 2, 3, None],
        "entry_offset": [0, 0, 0, 3, 4],
        "batch_size": [3, 3, 3, -1, 1],
        "entry_format": [formats.PULSAR] * 4 + [formats.KAFKA],
    }
    same_entries(pa.Table.from_pydict(rows, schema=SCHEMA))


# -- errors ------------------------------------------------------------------------------------


def entry(payload: bytes, count: int = 2, fmt: int = formats.PULSAR) -> Entry:
    return Entry(0, count, 1, -1, fmt, payload)


GOOD = pulsar_batch(0, [(b"one", "k", {}, None, None), (b"two", None, {}, None, None)])
_META_SIZE = struct.unpack_from(">I", GOOD.payload)[0]


def lz4_batch_with_wrong_size() -> bytes:
    data = build_batch([BatchedMessage(pb.SingleMessageMetadata(), b"x" * 50)])
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=1,
        compression=compression.LZ4,
        uncompressed_size=len(data) + 3,
    )
    return pack_payload(metadata, compression.compress(compression.LZ4, data))


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        pytest.param(entry(GOOD.payload, count=3), UnsupportedEntryFormatError, id="count-differs"),
        pytest.param(entry(b"x", fmt=9), UnsupportedEntryFormatError, id="unknown-format"),
        pytest.param(entry(GOOD.payload[:-1]), BatchFormatError, id="batch-cut-short"),
        pytest.param(entry(GOOD.payload + b"\x00"), BatchFormatError, id="batch-trailing-byte"),
        pytest.param(
            entry(GOOD.payload[: 4 + _META_SIZE] + b"\x00\x00\x00\x01\xff" + b"x" * 9),
            BatchFormatError,
            id="metadata-garbage",
        ),
        pytest.param(entry(lz4_batch_with_wrong_size(), 1), CompressionError, id="lz4-size"),
    ],
)
def test_bad_entries_fail_as_the_row_by_row_path_does(bad: Entry, error: type[Exception]) -> None:
    entries = [pulsar_batch(100, [(b"fine", None, {}, None, None)]), bad]
    expected = outcome(lambda: reference_table(entries))
    assert isinstance(expected, tuple)
    assert issubclass(expected[0], error)
    assert outcome(lambda: entries_to_table(entries)) == expected


# -- random entries ------------------------------------------------------------------------------

texts = st.text(max_size=10)
u63 = st.integers(0, 2**63 // 1000)
random_rows = st.lists(
    st.tuples(
        st.binary(max_size=20),
        st.none() | texts,
        st.dictionaries(st.sampled_from(["a", "b", ""]) | texts, texts, max_size=3),
        st.none() | u63,
        st.none() | u63,
    ),
    min_size=1,
    max_size=12,
)
random_entries = st.lists(
    st.tuples(random_rows, st.sampled_from(compression.CODECS), st.booleans()), max_size=6
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(random_entries, st.data())
def test_random_pulsar_entries_round_trip_as_rows_do(
    spec: list[tuple[list[Any], int, bool]], data: st.DataObject
) -> None:
    entries, offset = [], 0
    for rows, codec, batched in spec:
        if batched:
            entries.append(pulsar_batch(offset, rows, codec=codec))
        else:
            value, key, props, event_time, _ = rows[0]
            row = MessageRow(value, key, props, -1 if event_time is None else event_time, "p", 3)
            payload = formats.pack(formats.PULSAR, [row], 1)
            entries.append(Entry(offset, 1, 1, -1, formats.PULSAR, payload))
        offset += entries[-1].count
    table = same_table(entries)
    same_entries(table)
    if table.num_rows:
        start = data.draw(st.integers(0, table.num_rows - 1))
        same_entries(table.slice(start, data.draw(st.integers(0, table.num_rows))))


def test_row_groups_never_split_an_entry() -> None:
    table = entries_to_table(mixed_entries())
    starts = table.column("entry_offset").to_pylist()
    for target in (1, 2, 3, 7, 50, 51, 1000):
        cuts = entry_boundaries(table, target)
        expected, last = [0], 0
        for i in range(1, len(starts)):
            if i - last >= target and starts[i] != starts[i - 1]:
                expected.append(i)
                last = i
        assert cuts == expected
    assert entry_boundaries(table.slice(0, 0), 5) == [0]
    assert list(itertools.islice(table_to_entries(table, 0), 1))  # lazily, one entry at a time
