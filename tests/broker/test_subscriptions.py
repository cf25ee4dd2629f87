"""The four subscription types with several consumers, and unsubscribe, with the official
client: who may attach, who gets which message, and what happens when one leaves."""

from __future__ import annotations

from collections import defaultdict

import pulsar
import pytest

from tests.broker.conftest import assert_nothing_more, drain, payloads, receive_n

EARLIEST = pulsar.InitialPosition.Earliest


def _send_all(
    producer: pulsar.Producer, messages: list[bytes], keys: list[str] | None = None
) -> None:
    for i, m in enumerate(messages):
        producer.send_async(m, None, partition_key=keys[i] if keys else None)
    producer.flush()


def test_exclusive_subscription_refuses_a_second_consumer(
    client: pulsar.Client, topic: str
) -> None:
    first = client.subscribe(topic, "only-one", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy, match="ConsumerBusy"):
        client.subscribe(topic, "only-one", consumer_type=pulsar.ConsumerType.Exclusive)
    # The refused consumer did not disturb the first one.
    client.create_producer(topic).send(b"still mine")
    assert first.receive(10_000).data() == b"still mine"
    # Once the first consumer has gone, the subscription takes a new one.
    first.close()
    client.subscribe(topic, "only-one", consumer_type=pulsar.ConsumerType.Exclusive).close()


def test_a_subscription_refuses_a_consumer_of_another_type(
    client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "typed", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "typed", consumer_type=pulsar.ConsumerType.Failover)


def test_shared_spreads_messages_over_consumers(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        for _ in range(2)
    ]
    sent = payloads(100)
    _send_all(client.create_producer(topic, batching_enabled=False), sent)
    got = [drain(c) for c in consumers]
    assert all(got), f"a consumer got nothing: {[len(g) for g in got]}"
    everything = got[0] + got[1]
    assert sorted(everything) == sent  # every message once: no loss, no duplicate
    assert all(g == sorted(g) for g in got)  # each consumer sees them in order


@pytest.mark.parametrize("batched", [False, True], ids=["single", "key-batched"])
def test_key_shared_keeps_each_key_on_one_consumer(
    client: pulsar.Client, topic: str, batched: bool
) -> None:
    consumers = [
        client.subscribe(
            topic,
            "by-key",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=f"c{i}",
        )
        for i in range(3)
    ]
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=5,
    )
    keys = [f"key-{i % 12}" for i in range(240)]
    sent = payloads(240)
    _send_all(producer, sent, keys)
    owner: dict[str, set[int]] = defaultdict(set)
    per_key: dict[str, list[bytes]] = defaultdict(list)
    received = []
    for index, consumer in enumerate(consumers):
        while True:
            try:
                msg = consumer.receive(500)
            except pulsar.Timeout:
                break
            consumer.acknowledge(msg)
            owner[msg.partition_key()].add(index)
            per_key[msg.partition_key()].append(msg.data())
            received.append(msg.data())
    assert sorted(received) == sent
    assert all(len(o) == 1 for o in owner.values()), dict(owner)
    assert len({next(iter(o)) for o in owner.values()}) > 1, "all keys went to one consumer"
    for key, data in per_key.items():  # each key's messages in the order they were sent
        assert data == [m for m, k in zip(sent, keys, strict=True) if k == key]


def test_failover_delivers_to_one_consumer_and_moves_to_the_standby(
    client: pulsar.Client, topic: str
) -> None:
    first, second = (
        client.subscribe(
            topic,
            "fo",
            consumer_type=pulsar.ConsumerType.Failover,
            consumer_name=name,
            receiver_queue_size=5,
        )
        for name in ("a-consumer", "b-consumer")
    )
    sent = payloads(30)
    _send_all(client.create_producer(topic), sent)
    # Exactly one of them is active and gets messages; the other stands by.
    try:
        msg = first.receive(2_000)
        active, standby = first, second
    except pulsar.Timeout:
        msg = second.receive(10_000)
        active, standby = second, first
    assert msg.data() == sent[0]
    active.acknowledge(msg)
    acked = [msg.data()] + [m.data() for m in receive_n(active, 9)]
    assert acked == sent[:10]
    assert_nothing_more(standby)
    active.close()  # its acks are flushed; what it held unacked goes to the standby
    rest = drain(standby)
    assert rest == sent[10:]  # nothing acked comes again, nothing is lost


def test_unsubscribe_deletes_the_subscription(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "gone", initial_position=EARLIEST)
    _send_all(producer, payloads(5))
    receive_n(consumer, 5)  # all acknowledged
    consumer.unsubscribe()
    # A subscription of that name starts afresh: the acknowledged messages are there again.
    again = client.subscribe(topic, "gone", initial_position=EARLIEST)
    assert [m.data() for m in receive_n(again, 5)] == payloads(5)


def test_unsubscribe_is_refused_while_other_consumers_are_attached(
    client: pulsar.Client, topic: str
) -> None:
    one = client.subscribe(topic, "busy", consumer_type=pulsar.ConsumerType.Shared)
    other = client.subscribe(topic, "busy", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.BrokerMetadataError):  # Pulsar's answer too
        one.unsubscribe()
    # The subscription survived: the other consumer still gets messages.
    client.create_producer(topic).send(b"after")
    got = drain(one) + drain(other)
    assert got == [b"after"]


def test_key_shared_consumer_leaving_hands_its_keys_over(client: pulsar.Client, topic: str) -> None:
    def join(name: str) -> pulsar.Consumer:
        return client.subscribe(
            topic, "handover", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name
        )

    leaving, staying = join("leaving"), join("staying")
    keys = [f"k{i % 8}" for i in range(80)]
    sent = payloads(80)
    _send_all(client.create_producer(topic), sent, keys)
    held = drain(leaving, ack=False)  # received, never acknowledged
    kept = drain(staying)
    assert held and kept, "both consumers should own some keys"
    leaving.close()
    taken_over = drain(staying)
    assert sorted(taken_over) == sorted(held)  # all of them, and only those
    assert sorted(kept + taken_over) == sent
