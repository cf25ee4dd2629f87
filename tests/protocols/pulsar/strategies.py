"""Hypothesis strategies for Pulsar protocol objects."""

from __future__ import annotations

from hypothesis import strategies as st

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb

T = pb.BaseCommand.Type

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
names = st.text(max_size=24)
key_values = st.lists(st.builds(lambda k, v: pb.KeyValue(key=k, value=v), names, names), max_size=4)
payload_bytes = st.binary(max_size=2048)


def _flow(consumer_id: int, permits: int) -> pb.BaseCommand:
    body = pb.CommandFlow(consumer_id=consumer_id, message_permits=permits)
    return pb.BaseCommand(type=T.FLOW, flow=body)


def _lookup(request_id: int, topic: str, authoritative: bool) -> pb.BaseCommand:
    body = pb.CommandLookupTopic(topic=topic, request_id=request_id, authoritative=authoritative)
    return pb.BaseCommand(type=T.LOOKUP, lookup_topic=body)


def _producer(
    producer_id: int, request_id: int, topic: str, meta: list[pb.KeyValue]
) -> pb.BaseCommand:
    body = pb.CommandProducer(
        topic=topic, producer_id=producer_id, request_id=request_id, metadata=meta
    )
    return pb.BaseCommand(type=T.PRODUCER, producer=body)


def _ack(consumer_id: int, ids: list[tuple[int, int]]) -> pb.BaseCommand:
    body = pb.CommandAck(
        consumer_id=consumer_id,
        ack_type=pb.CommandAck.Individual,
        message_id=[pb.MessageIdData(ledger_id=ledger, entry_id=entry) for ledger, entry in ids],
    )
    return pb.BaseCommand(type=T.ACK, ack=body)


simple_commands = st.one_of(
    st.just(pb.BaseCommand(type=T.PING, ping=pb.CommandPing())),
    st.just(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong())),
    st.builds(_flow, u64, u32),
    st.builds(_lookup, u64, names, st.booleans()),
    st.builds(_producer, u64, u64, names, key_values),
    st.builds(_ack, u64, st.lists(st.tuples(u64, u64), max_size=5)),
)


def _send(producer_id: int, sequence_id: int, count: int) -> pb.BaseCommand:
    body = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, num_messages=count)
    return pb.BaseCommand(type=T.SEND, send=body)


def _message(consumer_id: int, ledger: int, entry: int, redeliveries: int) -> pb.BaseCommand:
    body = pb.CommandMessage(
        consumer_id=consumer_id,
        message_id=pb.MessageIdData(ledger_id=ledger, entry_id=entry),
        redelivery_count=redeliveries,
    )
    return pb.BaseCommand(type=T.MESSAGE, message=body)


payload_commands = st.one_of(
    st.builds(_send, u64, u64, st.integers(1, 1000)),
    st.builds(_message, u64, u64, u64, u32),
)


def _metadata(
    producer: str, sequence_id: int, publish_time: int, props: list[pb.KeyValue], key: str | None
) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(
        producer_name=producer,
        sequence_id=sequence_id,
        publish_time=publish_time,
        properties=props,
    )
    if key is not None:
        metadata.partition_key = key
    return metadata


metadatas = st.builds(_metadata, names, u64, u64, key_values, st.none() | names)


def _single(props: list[pb.KeyValue], key: str | None, event_time: int) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(properties=props, payload_size=0, event_time=event_time)
    if key is not None:
        single.partition_key = key
    return single


single_metadatas = st.builds(_single, key_values, st.none() | names, u64)
