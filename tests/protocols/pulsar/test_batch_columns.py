"""Batch payloads to and from columns: the hand-written SingleMessageMetadata reader and writer
give exactly what the protobuf path (``split_batch``, ``build_batch``) gives, errors included."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from magnetar.core.formats import MessageColumns, MessageRow
from magnetar.protocols.pulsar import batch_columns, compression
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import split_batch
from magnetar.protocols.pulsar.batch_columns import BatchColumns, fields_of, split_columns
from magnetar.protocols.pulsar.entry_format import PulsarEntryFormat
from magnetar.protocols.pulsar.errors import BatchFormatError
from magnetar.protocols.pulsar.frames import pack_payload

U64 = 2**64
FORMAT = PulsarEntryFormat()


# -- the protobuf path, as the reference --------------------------------------------------------


def reference_split(data: bytes, count: int, first_sequence_id: int) -> BatchColumns | str:
    """What split_columns must give: split_batch read through protobuf objects, or the error."""
    try:
        messages = split_batch(data, count)
    except BatchFormatError as e:
        return f"BatchFormatError: {e}"
    out = BatchColumns()
    for i, message in enumerate(messages):
        _, key, properties, event_time, sequence_id = fields_of(message.metadata)
        out.values.append(message.payload)
        out.keys.append(key)
        out.properties.append(properties)
        out.event_times.append(event_time)
        out.sequence_ids.append(first_sequence_id + i if sequence_id is None else sequence_id)
    return out


def fast_split(data: bytes, count: int, first_sequence_id: int) -> BatchColumns | str:
    try:
        return split_columns(data, count, first_sequence_id)
    except BatchFormatError as e:
        return f"BatchFormatError: {e}"


def outcome(call: Callable[[], object]) -> object:
    """A call's result, or its error as (type, message): what two paths must agree on."""
    try:
        return call()
    except Exception as e:
        return (type(e), str(e))


# -- building metadata field by field, in any order, with unknown fields ------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_bytes(number: int, wire_type: int, body: bytes | int) -> bytes:
    tag = varint(number << 3 | wire_type)
    if wire_type == 0:
        assert isinstance(body, int)
        return tag + varint(body)
    assert isinstance(body, bytes)
    return tag + (varint(len(body)) + body if wire_type == 2 else body)


def known(**fields: object) -> bytes:
    """One SingleMessageMetadata field as protobuf writes it (no payload_size required)."""
    return pb.SingleMessageMetadata(**fields).SerializePartialToString()  # type: ignore[arg-type]


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
u64 = st.integers(0, U64 - 1)
names = st.sampled_from(["a", "b", "type", "ключ", ""]) | texts

properties = st.builds(lambda k, v: known(properties=[pb.KeyValue(key=k, value=v)]), names, texts)
raw_keys = st.binary(max_size=8).map(lambda b: field_bytes(2, 2, b))  # often not UTF-8
scalar_fields = st.one_of(
    texts.map(lambda k: known(partition_key=k)),
    raw_keys,
    st.booleans().map(lambda b: known(compacted_out=b)),
    u64.map(lambda t: known(event_time=t)),
    st.booleans().map(lambda b: known(partition_key_b64_encoded=b)),
    st.binary(max_size=8).map(lambda b: known(ordering_key=b)),
    u64.map(lambda s: known(sequence_id=s)),
    st.booleans().map(lambda b: known(null_value=b)),
    st.booleans().map(lambda b: known(null_partition_key=b)),
)
unknown_fields = st.one_of(
    st.builds(field_bytes, st.integers(11, 2**29 - 1), st.just(0), u64),
    st.builds(
        field_bytes, st.integers(11, 2**29 - 1), st.just(1), st.binary(min_size=8, max_size=8)
    ),
    st.builds(field_bytes, st.integers(11, 2**29 - 1), st.just(2), st.binary(max_size=8)),
    st.builds(
        field_bytes, st.integers(11, 2**29 - 1), st.just(5), st.binary(min_size=4, max_size=4)
    ),
)
other_fields = st.lists(properties | scalar_fields | unknown_fields, max_size=8)


@st.composite
def messages(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(metadata, payload): random fields in a random order, payload_size among them."""
    payload = draw(st.binary(max_size=24))
    fields = [*draw(other_fields), known(payload_size=len(payload))]
    return b"".join(draw(st.permutations(fields))), payload


def batch_of(items: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(struct.pack(">I", len(meta)) + meta + payload for meta, payload in items)


batches = st.lists(messages(), max_size=6).map(lambda items: (batch_of(items), len(items)))


# -- reading ------------------------------------------------------------------------------------


def test_tags_are_those_of_the_proto() -> None:
    """The reader's and writer's field numbers and wire types, checked against pulsar_api.proto."""
    by_name = pb.SingleMessageMetadata.DESCRIPTOR.fields_by_name
    length_delimited = {"properties", "partition_key", "ordering_key"}
    tags = {
        "properties": batch_columns.TAG_PROPERTIES,
        "partition_key": batch_columns.TAG_PARTITION_KEY,
        "payload_size": batch_columns.TAG_PAYLOAD_SIZE,
        "compacted_out": batch_columns.TAG_COMPACTED_OUT,
        "event_time": batch_columns.TAG_EVENT_TIME,
        "partition_key_b64_encoded": batch_columns.TAG_KEY_B64_ENCODED,
        "ordering_key": batch_columns.TAG_ORDERING_KEY,
        "sequence_id": batch_columns.TAG_SEQUENCE_ID,
        "null_value": batch_columns.TAG_NULL_VALUE,
        "null_partition_key": batch_columns.TAG_NULL_PARTITION_KEY,
    }
    assert set(tags) == set(by_name)
    for name, tag in tags.items():
        assert tag == by_name[name].number << 3 | (2 if name in length_delimited else 0), name
    assert {f.number for f in by_name.values()} == set(batch_columns.KNOWN_FIELDS)
    kv = pb.KeyValue.DESCRIPTOR.fields_by_name
    kv_tags = (kv["key"].number << 3 | 2, kv["value"].number << 3 | 2)
    assert kv_tags == (batch_columns.TAG_KV_KEY, batch_columns.TAG_KV_VALUE)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.integers(0, U64 - 1))
def test_reads_random_metadata_as_protobuf_does(batch: tuple[bytes, int], first: int) -> None:
    data, count = batch
    assert fast_split(data, count, first) == reference_split(data, count, first)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.integers(-2, 2), st.data())
def test_malformed_batches_fail_as_split_batch_does(
    batch: tuple[bytes, int], count_error: int, data: st.DataObject
) -> None:
    raw, count = batch
    mutation = data.draw(st.sampled_from(["cut", "flip", "append", "none"]))
    if mutation == "cut" and raw:
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif mutation == "flip" and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    elif mutation == "append":
        raw += data.draw(st.binary(min_size=1, max_size=6))
    count += count_error
    assert fast_split(raw, count, 7) == reference_split(raw, count, 7)


def single(metadata: bytes, payload: bytes = b"abc") -> bytes:
    return struct.pack(">I", len(metadata)) + metadata + payload


SIZE_3 = known(payload_size=3)


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param(field_bytes(2, 2, b"\xff\xfe") + SIZE_3, id="key-not-utf8"),
        pytest.param(field_bytes(2, 0, 5) + SIZE_3, id="known-field-other-wire-type"),
        pytest.param(b"\x92\x00\x01k" + SIZE_3, id="tag-in-two-bytes"),
        pytest.param(b"\x18\x83\x80\x80\x80\x80\x80\x80\x80\x80\x00", id="size-in-ten-bytes"),
        pytest.param(b"\x18" + varint(2**32 + 3), id="size-over-32-bits"),
        pytest.param(b"\x18" + varint(U64 - 1), id="size-negative"),
        pytest.param(SIZE_3 + b"\x28" + b"\xff" * 9 + b"\x7f", id="varint-over-64-bits"),
        pytest.param(SIZE_3 + b"\x28" + b"\xff" * 10 + b"\x01", id="varint-of-eleven-bytes"),
        pytest.param(SIZE_3 + field_bytes(11, 3, b"") + field_bytes(11, 4, b""), id="group"),
        pytest.param(SIZE_3 + field_bytes(12, 6, b""), id="wire-type-6"),
        pytest.param(SIZE_3 + b"\x00\x01", id="field-number-0"),
        pytest.param(SIZE_3 + field_bytes(1, 2, field_bytes(1, 2, b"k")), id="value-missing"),
        pytest.param(
            SIZE_3 + field_bytes(1, 2, field_bytes(2, 2, b"v") + field_bytes(1, 2, b"k")),
            id="key-value-reversed",
        ),
        pytest.param(
            SIZE_3
            + field_bytes(
                1, 2, pb.KeyValue(key="k", value="v").SerializeToString() + field_bytes(3, 0, 1)
            ),
            id="key-value-unknown-field",
        ),
        pytest.param(
            SIZE_3 + field_bytes(1, 2, field_bytes(1, 2, b"\xff") + field_bytes(2, 2, b"v")),
            id="property-not-utf8",
        ),
        pytest.param(field_bytes(2, 2, b"k"), id="size-missing"),
        pytest.param(SIZE_3 + b"\x12\x05ab", id="key-overruns-metadata"),
        pytest.param(SIZE_3 + b"\x28", id="varint-cut-short"),
        pytest.param(SIZE_3 + b"\x28\x80\x80\x01", id="varint-non-minimal"),
    ],
)
def test_unusual_metadata_reads_as_protobuf_reads_it(metadata: bytes) -> None:
    """Each of these is left to protobuf (read the same way, or refused the same way)."""
    for tail in (b"", single(SIZE_3)):
        data = single(metadata) + tail
        count = 1 + bool(tail)
        assert fast_split(data, count, 0) == reference_split(data, count, 0)


def test_what_clients_write_never_falls_back_to_protobuf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Canonical metadata with every field the clients set takes the hand-written path."""

    def no_protobuf(data: bytes, pos: int) -> pb.SingleMessageMetadata:
        raise AssertionError(f"message at byte {pos} fell back to protobuf")

    monkeypatch.setattr(batch_columns, "_parse", no_protobuf)
    items = []
    for i in range(300):
        metadata = pb.SingleMessageMetadata(
            partition_key=f"user-{i}" * (i % 30),
            payload_size=i * 3,
            event_time=1_700_000_000_000 + i,
            sequence_id=i**5,
            ordering_key=b"o",
            null_value=i % 2 == 0,
            properties=[pb.KeyValue(key="k" * (i % 200), value=str(i) * i)],
        )
        items.append((metadata.SerializeToString(), b"x" * (i * 3)))
    data = batch_of(items)
    assert split_columns(data, 300, 0) == reference_split(data, 300, 0)


# -- whole entries: unpack_columns against unpack ------------------------------------------------


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.sampled_from(compression.CODECS), st.booleans(), st.data())
def test_unpack_columns_is_unpack_by_columns(
    batch: tuple[bytes, int], codec: int, batched: bool, data: st.DataObject
) -> None:
    raw, count = batch
    assume(batched or count == 1)
    metadata = pb.MessageMetadata(
        producer_name=data.draw(st.sampled_from(["", "producer-1"])),
        sequence_id=data.draw(u64),
        publish_time=1,
        compression=codec,  # type: ignore[arg-type]
        uncompressed_size=len(raw),
    )
    if data.draw(st.booleans()):
        metadata.schema_version = struct.pack(">q", data.draw(st.integers(-(2**63), 2**63 - 1)))
    if batched:
        metadata.num_messages_in_batch = count + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
        body = raw
    else:  # a single message: its fields live in the MessageMetadata
        metadata.partition_key = data.draw(texts)
        metadata.event_time = data.draw(u64)
        body = data.draw(st.binary(max_size=16))
        metadata.uncompressed_size = len(body)
    payload = pack_payload(metadata, compression.compress(codec, body))
    expected = outcome(lambda: MessageColumns.of_rows(FORMAT.unpack(payload)))
    got = outcome(lambda: FORMAT.unpack_columns(payload))
    if isinstance(got, MessageColumns) and not got.values:  # no row to carry the entry fields
        got.producer_name, got.schema_version, got.batch_size = None, None, -1
    assert got == expected


# -- writing ------------------------------------------------------------------------------------


ints = st.none() | st.integers(-5, 300) | u64 | st.integers(U64, U64 + 5)
columns_of_messages = st.builds(
    lambda ms, batched, producer, version: MessageColumns(
        values=[m[0] for m in ms],
        keys=[m[1] for m in ms],
        properties=[m[2] for m in ms],
        event_times=[m[3] for m in ms],
        sequence_ids=[m[4] for m in ms],
        producer_name=producer,
        schema_version=version,
        batch_size=len(ms) if batched else -1,  # -1: one message, whose fields the entry keeps
    ),
    st.lists(
        st.tuples(
            st.binary(max_size=200),
            st.none() | texts,
            st.dictionaries(names, texts, max_size=3),
            ints,
            ints,
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
    st.sampled_from([None, "", "p"]),
    st.none() | st.integers(-(2**63), 2**63 - 1),
)


def without_protobuf_fallback() -> PulsarEntryFormat:
    """A format whose row-wise ``pack`` (the fallback of ``pack_columns``) fails the test."""
    writer = PulsarEntryFormat()

    def no_fallback(rows: object, publish_time: int) -> bytes:
        raise AssertionError("pack_columns fell back to protobuf")

    writer.pack = no_fallback  # type: ignore[method-assign]
    return writer


@settings(max_examples=300)
@given(columns_of_messages)
def test_pack_columns_writes_what_pack_writes(columns: MessageColumns) -> None:
    expected = outcome(lambda: FORMAT.pack(columns.rows(), 5))
    assert outcome(lambda: FORMAT.pack_columns(columns, 5)) == expected
    if all(t is None or t < U64 for t in [*columns.event_times, *columns.sequence_ids]):
        # the hand-written writer did it all, byte for byte, and it reads back
        assert without_protobuf_fallback().pack_columns(columns, 5) == expected
        assert isinstance(expected, bytes)
        held = len(columns) if columns.batch_size >= 0 else 1
        assert FORMAT.unpack_columns(expected).values == columns.values[:held]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("event_times", [U64]),
        ("sequence_ids", [U64 + 1]),
        ("keys", ["\ud800"]),  # a lone surrogate: not UTF-8
        ("keys", [b"bytes"]),  # protobuf takes UTF-8 bytes for a string
        ("values", [None]),
        ("properties", [{"k": None}]),  # a KeyValue without a value: protobuf refuses
    ],
)
def test_values_the_writer_leaves_to_protobuf(field: str, value: list[object]) -> None:
    """In the second message, so the entry's own metadata (from the first) is fine."""
    columns = MessageColumns([b"v", b"w"], ["k", "l"], [{}, {}], [None, 3], [1, 2], batch_size=2)
    getattr(columns, field)[1:] = value
    expected = outcome(lambda: FORMAT.pack(columns.rows(), 5))
    assert outcome(lambda: FORMAT.pack_columns(columns, 5)) == expected
    with pytest.raises(AssertionError, match="fell back"):
        without_protobuf_fallback().pack_columns(columns, 5)


def test_single_messages_and_empty_entries_pack_as_rows_do() -> None:
    single_message = MessageColumns([b"v"], ["k"], [{"a": "b"}], [3], [9], producer_name="p")
    assert FORMAT.pack_columns(single_message, 5) == FORMAT.pack(single_message.rows(), 5)
    empty = MessageColumns([], [], [], [], [], batch_size=0)
    assert outcome(lambda: FORMAT.pack_columns(empty, 5)) == outcome(
        lambda: FORMAT.pack(empty.rows(), 5)
    )


def test_rows_and_columns_convert_both_ways() -> None:
    rows = [
        MessageRow(b"a", "k", {"x": "y"}, 5, "p", 7, 3, 2),
        MessageRow(b"b", None, {}, -1, "p", -1, 3, 2),
    ]
    columns = MessageColumns.of_rows(rows)
    assert columns == MessageColumns(
        [b"a", b"b"], ["k", None], [{"x": "y"}, {}], [5, None], [7, None], "p", 3, 2
    )
    assert columns.rows() == rows
