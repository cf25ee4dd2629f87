"""Seek and Reader with the official client: seek by message id and by publish time, readers
from earliest, latest or a given id (exclusive and inclusive), has_message_available and the
last message id."""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest

from tests.broker.conftest import RECEIVE_MS, assert_nothing_more, drain, payloads

EARLIEST = pulsar.InitialPosition.Earliest


def _produce(
    client: pulsar.Client, topic: str, messages: list[bytes], *, batched: bool = False
) -> list[pulsar.MessageId]:
    """Send ``messages``; returns their ids as the broker reported them."""
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=4, batching_max_publish_delay_ms=50
    )
    ids: dict[int, pulsar.MessageId] = {}

    def receipt(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, mid: pulsar.MessageId) -> None:
            ids[i] = mid

        return callback

    for i, m in enumerate(messages):
        producer.send_async(m, receipt(i))
    producer.flush()
    producer.close()
    return [ids[i] for i in range(len(messages))]


def _read_all(reader: pulsar.Reader) -> list[pulsar.Message]:
    out = []
    while True:
        try:
            out.append(reader.read_next(500))
        except pulsar.Timeout:
            return out


# -- seek -----------------------------------------------------------------------------------


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_seek_to_a_message_id_replays_from_there(
    client: pulsar.Client, topic: str, batched: bool, inclusive: bool
) -> None:
    sent = payloads(12)
    ids = _produce(client, topic, sent, batched=batched)
    consumer = client.subscribe(
        topic, "seeker", initial_position=EARLIEST, start_message_id_inclusive=inclusive
    )
    assert drain(consumer) == sent  # everything acknowledged
    # The broker rewinds to the message's entry; the client, as with Pulsar, then drops the
    # message itself unless the consumer asked for inclusive starts.
    consumer.seek(ids[5])
    assert drain(consumer) == sent[5:] if inclusive else sent[6:]
    consumer.seek(pulsar.MessageId.earliest)
    assert drain(consumer) == sent


def test_seek_to_a_publish_time(client: pulsar.Client, topic: str) -> None:
    sent = payloads(10)
    _produce(client, topic, sent)
    consumer = client.subscribe(topic, "time", initial_position=EARLIEST)
    msgs = []
    for _ in sent:
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        msgs.append(msg)
    when = msgs[6].publish_timestamp()
    consumer.seek(when)
    # From the first message published at or after that time (several may share a ms).
    expected = [m.data() for m in msgs if m.publish_timestamp() >= when]
    assert drain(consumer) == expected
    assert expected[-4:] == sent[6:]
    consumer.seek(msgs[-1].publish_timestamp() + 60_000)  # after everything: nothing
    assert_nothing_more(consumer)


# -- readers --------------------------------------------------------------------------------


def test_reader_from_earliest_reads_everything(client: pulsar.Client, topic: str) -> None:
    sent = payloads(8)
    _produce(client, topic, sent, batched=True)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in _read_all(reader)] == sent


def test_reader_from_latest_reads_only_new_messages(client: pulsar.Client, topic: str) -> None:
    _produce(client, topic, payloads(3, "old"))
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    _produce(client, topic, payloads(2, "new"))
    assert [m.data() for m in _read_all(reader)] == payloads(2, "new")


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_reader_from_a_message_id_is_exclusive_by_default(
    client: pulsar.Client, topic: str, batched: bool
) -> None:
    sent = payloads(10)
    ids = _produce(client, topic, sent, batched=batched)
    reader = client.create_reader(topic, ids[4])
    assert [m.data() for m in _read_all(reader)] == sent[5:]


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_reader_from_a_message_id_inclusive(
    client: pulsar.Client, topic: str, batched: bool
) -> None:
    sent = payloads(10)
    ids = _produce(client, topic, sent, batched=batched)
    reader = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert [m.data() for m in _read_all(reader)] == sent[4:]


def test_has_message_available_follows_the_topic(client: pulsar.Client, topic: str) -> None:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()  # empty topic
    _produce(client, topic, [b"one", b"two"])
    assert reader.has_message_available()
    assert reader.read_next(RECEIVE_MS).data() == b"one"
    assert reader.has_message_available()
    assert reader.read_next(RECEIVE_MS).data() == b"two"
    assert not reader.has_message_available()


def test_reader_seek_by_time_and_id(client: pulsar.Client, topic: str) -> None:
    sent = payloads(6)
    ids = _produce(client, topic, sent)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in _read_all(reader)] == sent
    reader.seek(ids[3])  # exclusive, as for a reader's start
    assert [m.data() for m in _read_all(reader)] == sent[4:]
    reader.seek(0)  # publish time 0: the beginning
    assert [m.data() for m in _read_all(reader)] == sent


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_get_last_message_id(client: pulsar.Client, topic: str, batched: bool) -> None:
    consumer = client.subscribe(topic, "last")
    ids = _produce(client, topic, payloads(7), batched=batched)
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert last.batch_index() == ids[-1].batch_index()
    if batched:
        assert last.batch_index() >= 0
