"""Acknowledgements and redelivery with the official client: individual and cumulative acks
(batched or not), negative acks with their redelivery count, the dead-letter topic, ack
timeout and explicit redelivery."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.testing.server import StandaloneProcess
from tests.broker.conftest import (
    RECEIVE_MS,
    RawConnection,
    assert_nothing_more,
    drain,
    payloads,
    receive_n,
)

T = pb.BaseCommand.Type

EARLIEST = pulsar.InitialPosition.Earliest


def _produce(client: pulsar.Client, topic: str, messages: list[bytes], *, batched: bool) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=5,
        batching_max_publish_delay_ms=50,
    )
    for m in messages:
        producer.send_async(m, None)
    producer.flush()
    producer.close()


def _subscribe(client: pulsar.Client, topic: str, sub: str, **kwargs: object) -> pulsar.Consumer:
    return client.subscribe(
        topic, sub, initial_position=EARLIEST, batch_index_ack_enabled=True, **kwargs
    )


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_individual_acks_leave_only_unacked_messages(
    client: pulsar.Client, topic: str, batched: bool
) -> None:
    sent = payloads(20)
    _produce(client, topic, sent, batched=batched)
    consumer = _subscribe(client, topic, "ind")
    for i, msg in enumerate(receive_n(consumer, 20, ack=False)):
        if i % 3 == 0:
            consumer.acknowledge(msg)
    consumer.close()  # flushes the acks

    again = _subscribe(client, topic, "ind")
    assert drain(again) == [m for i, m in enumerate(sent) if i % 3 != 0]


@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_cumulative_ack_acknowledges_everything_up_to_it(
    client: pulsar.Client, topic: str, batched: bool
) -> None:
    sent = payloads(20)
    _produce(client, topic, sent, batched=batched)
    consumer = _subscribe(client, topic, "cum")
    got = receive_n(consumer, 20, ack=False)
    consumer.acknowledge_cumulative(got[11])  # in the middle of a batch when batched
    consumer.close()

    again = _subscribe(client, topic, "cum")
    assert drain(again) == sent[12:]


def test_negative_ack_redelivers_with_a_growing_redelivery_count(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(
        topic,
        "nack",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(topic)
    producer.send(b"retry me")
    producer.send(b"fine")
    counts = []
    for _ in range(3):
        msg = consumer.receive(RECEIVE_MS)
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            msg = consumer.receive(RECEIVE_MS)
        assert msg.data() == b"retry me"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    msg = consumer.receive(RECEIVE_MS)
    consumer.acknowledge(msg)
    assert (msg.data(), msg.redelivery_count()) == (b"retry me", 3)
    assert_nothing_more(consumer)


def test_negative_acks_end_in_the_dead_letter_topic(client: pulsar.Client, topic: str) -> None:
    dlq_topic = topic + "-DLQ"
    dead = client.subscribe(dlq_topic, "dlq-reader", initial_position=EARLIEST)
    consumer = client.subscribe(
        topic,
        "with-dlq",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq_topic
        ),
    )
    producer = client.create_producer(topic)
    producer.send(b"poison", properties={"origin": "test"})
    producer.send(b"good")
    seen = []
    while True:  # nack "poison" every time it comes; ack "good"
        try:
            msg = consumer.receive(2_000)
        except pulsar.Timeout:
            break
        if msg.data() == b"good":
            consumer.acknowledge(msg)
            continue
        seen.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert seen == [0, 1, 2]  # delivered max_redeliver_count + 1 times, then dead-lettered

    letter = dead.receive(RECEIVE_MS)
    dead.acknowledge(letter)
    assert letter.data() == b"poison"
    assert letter.properties()["origin"] == "test"
    assert letter.properties().get("REAL_TOPIC") == topic
    assert_nothing_more(dead)


@pytest.mark.slow
def test_ack_timeout_redelivers_what_was_not_acknowledged(
    client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(
        topic,
        "timeout",
        consumer_type=pulsar.ConsumerType.Shared,
        unacked_messages_timeout_ms=10_000,  # the client's minimum
    )
    producer = client.create_producer(topic)
    producer.send(b"acked")
    producer.send(b"forgotten")
    first, second = consumer.receive(RECEIVE_MS), consumer.receive(RECEIVE_MS)
    consumer.acknowledge(first)
    assert second.data() == b"forgotten"
    again = consumer.receive(25_000)  # 10 s timeout plus the tracker's tick
    consumer.acknowledge(again)
    assert again.data() == b"forgotten"
    assert again.redelivery_count() == 1
    assert_nothing_more(consumer)


def test_redeliver_unacknowledged_messages_on_request(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "explicit", initial_position=EARLIEST)
    sent = payloads(6)
    _produce(client, topic, sent, batched=False)
    got = receive_n(consumer, 6, ack=False)
    for msg in got[:2]:
        consumer.acknowledge(msg)
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 4)
    assert [m.data() for m in again] == sent[2:]
    assert all(m.redelivery_count() == 1 for m in again)
    assert_nothing_more(consumer)


async def test_ack_of_a_whole_batch_the_subscription_did_not_deliver(
    client: pulsar.Client, topic: str, standalone: StandaloneProcess
) -> None:
    """An ack can name an entry this subscription has not handed out since it was loaded (a
    client acking after a reconnect or a broker restart). Without an ack set it covers every
    message of the batch, not only the first."""
    _produce(client, topic, payloads(5), batched=True)  # one entry of 5 messages
    [entry_id] = {(m.ledger_id(), m.entry_id()) for m in _ids_of(client, topic)}
    async with RawConnection.open(standalone.pulsar_port) as conn:
        subscribe = pb.CommandSubscribe(
            topic=topic,
            subscription="late-ack",
            sub_type=pb.CommandSubscribe.SubType.Exclusive,
            consumer_id=1,
            request_id=1,
            initial_position=pb.CommandSubscribe.InitialPosition.Earliest,
        )
        assert (await conn.request(T.SUBSCRIBE, subscribe=subscribe)).type == T.SUCCESS
        # No FLOW yet: nothing was delivered on this connection when the ack arrives.
        ack = pb.CommandAck(
            consumer_id=1,
            ack_type=pb.CommandAck.AckType.Individual,
            message_id=[pb.MessageIdData(ledger_id=entry_id[0], entry_id=entry_id[1])],
            request_id=2,
        )
        assert (await conn.request(T.ACK, ack=ack)).type == T.ACK_RESPONSE
    again = _subscribe(client, topic, "late-ack")
    assert_nothing_more(again)


def _ids_of(client: pulsar.Client, topic: str) -> list[pulsar.MessageId]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        return [m.message_id() for m in (reader.read_next(RECEIVE_MS) for _ in range(5))]
    finally:
        reader.close()
