"""The codec against the real pulsar-client.

A fake broker made of the codec alone (fake_broker.py) answers the client. What a producer
sends decodes to exactly what it sent, for every compression codec with batching off and on;
and the entries, stored as received and delivered back as MESSAGE frames, reach a consumer
intact.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.batch import BatchedMessage, is_batch, unpack
from magnetar.protocols.pulsar.frames import Frame

from .fake_broker import LEDGER, FakeBroker, T

TIMEOUT = 20
BATCH_SIZE = 4


@dataclass(frozen=True)
class Sent:
    payload: bytes
    key: str
    properties: dict[str, str]
    event_time: int


MESSAGES = [
    Sent(
        f"message {i} ".encode() * (i * 7 + 1), f"key-{i % 3}", {"i": str(i), "tag": "t"}, 1000 + i
    )
    for i in range(10)
]
COMPRESSIONS = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}
WIRE_CODECS = {
    "none": pb.CompressionType.NONE,
    "lz4": pb.CompressionType.LZ4,
    "zlib": pb.CompressionType.ZLIB,
    "zstd": pb.CompressionType.ZSTD,
    "snappy": pb.CompressionType.SNAPPY,
}


def produce(url: str, compression: str, batching: bool) -> list[tuple[int, int, int]]:
    """Send MESSAGES with the blocking client; the (ledger, entry, batch index) it got back."""
    client = pulsar.Client(
        url,
        operation_timeout_seconds=TIMEOUT,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        producer = client.create_producer(
            "codec-check",
            compression_type=COMPRESSIONS[compression],
            batching_enabled=batching,
            # Batches close by count (or flush), never by a timer: the split is deterministic.
            batching_max_messages=BATCH_SIZE,
            batching_max_publish_delay_ms=60_000,
        )
        try:
            ids = send_async(producer) if batching else send_each(producer)
        finally:
            producer.close()
    finally:
        client.close()
    return [(i.ledger_id(), i.entry_id(), i.batch_index()) for i in ids]


def send_each(producer: pulsar.Producer) -> list[pulsar.MessageId]:
    return [
        producer.send(
            m.payload, properties=m.properties, partition_key=m.key, event_timestamp=m.event_time
        )
        for m in MESSAGES
    ]


def send_async(producer: pulsar.Producer) -> list[pulsar.MessageId]:
    results: dict[int, pulsar.MessageId] = {}
    done = threading.Event()

    def on_sent(index: int, result: pulsar.Result, message_id: pulsar.MessageId) -> None:
        assert result == pulsar.Result.Ok, result
        results[index] = message_id
        if len(results) == len(MESSAGES):
            done.set()

    for index, m in enumerate(MESSAGES):
        producer.send_async(
            m.payload,
            lambda r, i, n=index: on_sent(n, r, i),
            properties=m.properties,
            partition_key=m.key,
            event_timestamp=m.event_time,
        )
    producer.flush()
    assert done.wait(TIMEOUT), f"only {len(results)} of {len(MESSAGES)} sends completed"
    return [results[i] for i in range(len(MESSAGES))]


def received_messages(broker: FakeBroker) -> list[BatchedMessage]:
    found: list[BatchedMessage] = []
    for frame in broker.sends():
        assert frame.payload is not None
        found += unpack(frame.payload.metadata, frame.payload.data)
    return found


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("compression", list(COMPRESSIONS))
async def test_producer_payloads_decode_exactly(compression: str, batching: bool) -> None:
    async with FakeBroker() as broker:
        ids = await asyncio.wait_for(
            asyncio.to_thread(produce, broker.url, compression, batching), TIMEOUT
        )
    assert broker.unexpected == []
    received = received_messages(broker)
    assert [m.payload for m in received] == [m.payload for m in MESSAGES]
    assert [m.metadata.partition_key for m in received] == [m.key for m in MESSAGES]
    assert [dict((p.key, p.value) for p in m.metadata.properties) for m in received] == [
        m.properties for m in MESSAGES
    ]
    assert [m.metadata.event_time for m in received] == [m.event_time for m in MESSAGES]
    sends = broker.sends()
    codec = WIRE_CODECS[compression]
    assert all(f.payload and f.payload.metadata.compression == codec for f in sends)
    if batching:
        check_batches(sends, ids)
    else:
        assert not any(f.payload and is_batch(f.payload.metadata) for f in sends)
        assert ids == [(LEDGER, entry, -1) for entry in range(len(MESSAGES))]


def check_batches(sends: list[Frame], ids: list[tuple[int, int, int]]) -> None:
    sizes = [f.command.send.num_messages for f in sends]
    assert sizes == [4, 4, 2]
    assert [f.payload.metadata.num_messages_in_batch for f in sends if f.payload] == sizes
    # The client derives each message id from the entry id of its batch and its position.
    expected = [(LEDGER, entry, index) for entry, size in enumerate(sizes) for index in range(size)]
    assert ids == expected


async def test_handshake_is_what_the_facts_say() -> None:
    async with FakeBroker() as broker:
        await asyncio.wait_for(asyncio.to_thread(produce, broker.url, "none", False), TIMEOUT)
    [connect] = broker.commands(T.CONNECT)
    assert connect.connect.client_version.startswith("Pulsar-CPP-v")
    assert connect.connect.protocol_version == 20
    kinds = [f.type for f in broker.frames if f.type != T.SEND]
    assert kinds == [T.CONNECT, T.PARTITIONED_METADATA, T.LOOKUP, T.PRODUCER, T.CLOSE_PRODUCER]
    assert all(f.payload and f.payload.checksum is not None for f in broker.sends())


def consume(url: str, count: int) -> list[tuple[bytes, str, dict[str, str], tuple[int, ...]]]:
    """Receive ``count`` messages with the blocking client."""
    client = pulsar.Client(
        url,
        operation_timeout_seconds=TIMEOUT,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        consumer = client.subscribe(
            "codec-check", "check", initial_position=pulsar.InitialPosition.Earliest
        )
        try:
            received = []
            for _ in range(count):
                message = consumer.receive(timeout_millis=TIMEOUT * 1000)
                consumer.acknowledge(message)
                i = message.message_id()
                position = (i.ledger_id(), i.entry_id(), i.batch_index())
                received.append(
                    (message.data(), message.partition_key(), message.properties(), position)
                )
        finally:
            consumer.close()
    finally:
        client.close()
    return received


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
async def test_stored_entries_reach_a_consumer_intact(compression: str, batching: bool) -> None:
    async with FakeBroker() as broker:
        sent_ids = await asyncio.wait_for(
            asyncio.to_thread(produce, broker.url, compression, batching), TIMEOUT
        )
        received = await asyncio.wait_for(
            asyncio.to_thread(consume, broker.url, len(MESSAGES)), TIMEOUT
        )
    assert broker.unexpected == []
    assert [r[0] for r in received] == [m.payload for m in MESSAGES]
    assert [r[1] for r in received] == [m.key for m in MESSAGES]
    assert [r[2] for r in received] == [m.properties for m in MESSAGES]
    assert [r[3] for r in received] == sent_ids
