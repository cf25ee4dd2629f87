"""Schemas with the official client: JSON and Avro records round-trip, a consumer decodes
data written with an older schema version (fetched with GET_SCHEMA), and the broker's
default FULL compatibility refuses incompatible changes."""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest
from pulsar.schema import AvroSchema, Double, Integer, JsonSchema, Record, String

from tests.broker.conftest import RECEIVE_MS, assert_nothing_more

EARLIEST = pulsar.InitialPosition.Earliest


class Reading(Record):
    sensor = String(required=True)
    value = Double(required=True)
    seq = Integer(required=True)


# Other versions of the same record. The Avro record name is the class name, so each is
# built by a function that names it "Reading" too.


def reading_v2() -> type[Record]:
    """Reading plus a field with a default: compatible both ways (FULL)."""

    class Reading(Record):
        sensor = String(required=True)
        value = Double(required=True)
        seq = Integer(required=True)
        unit = String(required_default=True)

    return Reading


def reading_without_seq() -> type[Record]:
    """Drops a field that has no default: readers of the old version cannot read it."""

    class Reading(Record):
        sensor = String(required=True)
        value = Double(required=True)

    return Reading


def reading_seq_as_text() -> type[Record]:
    """Changes a field's type."""

    class Reading(Record):
        sensor = String(required=True)
        value = Double(required=True)
        seq = String(required=True)

    return Reading


@pytest.mark.parametrize("kind", [JsonSchema, AvroSchema], ids=["json", "avro"])
def test_record_schema_round_trip(client: pulsar.Client, topic: str, kind: type) -> None:
    producer = client.create_producer(topic, schema=kind(Reading))
    consumer = client.subscribe(topic, "typed", schema=kind(Reading))
    sent = [Reading(sensor=f"s{i}", value=i / 4, seq=i) for i in range(5)]
    for r in sent:
        producer.send(r)
    for r in sent:
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        value = msg.value()
        assert isinstance(value, Reading)
        assert (value.sensor, value.value, value.seq) == (r.sensor, r.value, r.seq)
    assert_nothing_more(consumer)


def test_consumer_reads_older_versions_through_get_schema(
    client: pulsar.Client, topic: str
) -> None:
    v2 = reading_v2()
    old = client.create_producer(topic, schema=AvroSchema(Reading))
    old.send(Reading(sensor="a", value=1.5, seq=1))
    new = client.create_producer(topic, schema=AvroSchema(v2))  # a second, compatible version
    new.send(v2(sensor="b", value=2.5, seq=2, unit="C"))
    consumer = client.subscribe(topic, "v2", schema=AvroSchema(v2), initial_position=EARLIEST)
    first, second = consumer.receive(RECEIVE_MS), consumer.receive(RECEIVE_MS)
    assert first.schema_version() != second.schema_version()
    # v1 bytes lack "unit": decoding them needs the writer's schema, which the client fetches
    # from the broker by the version each message carries.
    a, b = first.value(), second.value()
    assert (a.sensor, a.value, a.seq, a.unit) == ("a", 1.5, 1, None)
    assert (b.sensor, b.value, b.seq, b.unit) == ("b", 2.5, 2, "C")


@pytest.mark.parametrize(
    "changed", [reading_without_seq, reading_seq_as_text], ids=["drops-a-field", "changes-a-type"]
)
@pytest.mark.parametrize("kind", [JsonSchema, AvroSchema], ids=["json", "avro"])
def test_incompatible_schema_is_refused(
    client: pulsar.Client, topic: str, kind: type, changed: Callable[[], type[Record]]
) -> None:
    client.create_producer(topic, schema=kind(Reading)).send(Reading(sensor="x", value=0, seq=0))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=kind(changed()))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "wrong", schema=kind(changed()))


def test_schema_of_another_type_is_refused(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=JsonSchema(Reading))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=pulsar.schema.StringSchema())
