"""Kafka headers ↔ Pulsar properties without loss (issue 23, item 5): binary values, nulls and
repeated names survive Kafka → Pulsar form → Kafka, also when a Pulsar client hands the
properties out as a dict and sends them again. Pure, no server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker import formats
from magnetar.core.entries import Entry
from magnetar.protocols.kafka import conversion, properties, records
from magnetar.protocols.kafka.records import Record
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

TS = 1_700_000_000_000
maybe_bytes = st.one_of(st.none(), st.binary(max_size=16), st.text(max_size=8).map(str.encode))
names = st.sampled_from(["a", "b", "ü", properties.EXACT])  # few names: repeats are common
headers = st.lists(st.tuples(names, maybe_bytes), max_size=5).map(tuple)


@given(headers)
def test_headers_survive_properties_even_as_a_dict(hs: properties.Headers) -> None:
    props = properties.to_properties(hs)
    assert properties.to_headers(props) == hs
    assert properties.to_headers(dict(props).items()) == hs  # what a Pulsar client resends


def test_plain_text_headers_stay_plain_properties() -> None:
    props = properties.to_properties([("origin", b"kafka"), ("n", b"1")])
    assert props == [("origin", "kafka"), ("n", "1")]


def test_a_pulsar_message_properties_are_text_headers() -> None:
    assert properties.to_headers([("x", "y"), (properties.EXACT, "not json")]) == (
        ("x", b"y"),
        (properties.EXACT, b"not json"),
    )


record = st.builds(
    Record, key=maybe_bytes, value=maybe_bytes, timestamp=st.just(TS), headers=headers
)


@given(st.lists(record, min_size=1, max_size=4))
def test_records_survive_kafka_to_pulsar_to_kafka(recs: list[Record]) -> None:
    kafka_entry = Entry(7, len(recs), TS, TS, formats.KAFKA, records.encode(recs))
    pulsar_form = conversion.kafka_to_pulsar(kafka_entry)
    pulsar_entry = Entry(7, len(recs), TS, TS, formats.PULSAR, pulsar_form)
    back = records.decode(conversion.to_kafka_batch(pulsar_entry))
    fields = [(r.key, r.value, r.headers) for r in recs]
    assert [(r.key, r.value, r.headers) for r in back] == fields


def test_a_binary_key_travels_base64_flagged() -> None:
    entry = Entry(0, 1, TS, TS, formats.KAFKA, records.encode([Record(b"\xff\x00", b"v", TS)]))
    pulsar_form = conversion.kafka_to_pulsar(entry)
    size = int.from_bytes(pulsar_form[:4], "big")
    batch = pulsar_form[4 + size :]
    single = pb.SingleMessageMetadata.FromString(batch[4 : 4 + int.from_bytes(batch[:4], "big")])
    assert (single.partition_key, single.partition_key_b64_encoded) == ("/wA=", True)
    assert not single.HasField("ordering_key")  # pulsar-client's ordering_key() needs UTF-8


def test_a_pulsar_ordering_key_without_partition_key_is_the_kafka_key() -> None:
    single = pb.SingleMessageMetadata(payload_size=1, ordering_key=b"\x01ok")
    back = conversion._record(conversion.pulsar_batch.BatchedMessage(single, b"v"), TS)
    assert back.key == b"\x01ok"
