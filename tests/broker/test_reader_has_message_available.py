"""``Reader.has_message_available`` for readers that start at, or seek to, the latest id.

The client then cannot compare ids it has seen: it asks GET_LAST_MESSAGE_ID and compares the
last message id with the subscription's mark-delete position carried in the answer (as
apache/pulsar-client-python's ``reader_test.py`` expects). Without that position it answers
False on a topic that has messages.
"""

from __future__ import annotations

import pulsar

from tests.broker.conftest import RECEIVE_MS, payloads

LATEST = pulsar.MessageId.latest
EARLIEST = pulsar.MessageId.earliest


def test_seek_to_latest_then_send_makes_a_message_available(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    reader = client.create_reader(topic, EARLIEST)
    producer.send(b"msg-0")
    assert reader.has_message_available()

    reader.seek(LATEST)
    assert not reader.has_message_available()

    producer.send(b"msg-1")
    assert reader.has_message_available()
    assert reader.read_next(RECEIVE_MS).data() == b"msg-1"


def test_reader_at_latest_sees_the_last_message_only_when_inclusive(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    for data in payloads(3):
        last_id = producer.send(data)

    exclusive = client.create_reader(topic, LATEST)
    assert not exclusive.has_message_available()
    exclusive.close()

    inclusive = client.create_reader(topic, LATEST, start_message_id_inclusive=True)
    assert inclusive.has_message_available()
    msg = inclusive.read_next(RECEIVE_MS)
    assert msg.message_id() == last_id
    assert msg.data() == payloads(3)[-1]
    inclusive.close()


def test_reader_at_latest_on_a_batched_topic(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=50
    )
    for data in payloads(4):
        producer.send_async(data, None)
    producer.flush()

    reader = client.create_reader(topic, LATEST)
    assert not reader.has_message_available()
    producer.send(b"after")
    assert reader.has_message_available()
    assert reader.read_next(RECEIVE_MS).data() == b"after"


def test_reader_at_latest_on_an_empty_topic_has_nothing(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()
    for inclusive in (False, True):
        reader = client.create_reader(topic, LATEST, start_message_id_inclusive=inclusive)
        assert not reader.has_message_available()
        reader.close()


def test_earliest_reader_reads_everything_then_has_nothing(
    client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    for data in payloads(3):
        producer.send(data)
    reader = client.create_reader(topic, EARLIEST)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(RECEIVE_MS).data())
    assert got == payloads(3)
