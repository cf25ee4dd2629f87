"""A request whose handler fails as a whole is answered, not dropped (Kafka's
``getErrorResponse``): the response echoes the topics and partitions asked about with the
error's code, so the client retries a retriable refusal on the same connection. Before, any
such failure closed the connection, and a client lost its group coordinator over a
transient refusal (tests/cluster/test_brokers.py's Kafka group after a broker death).

The failing handler is the injected fault: a handler of a real in-process Kafka listener is
replaced by one that raises; the client is a bare socket speaking kafka-python's protocol
classes, so the test sees the very answer (or the closed connection)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest  # type: ignore[import-untyped]
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest  # type: ignore[import-untyped]
from kafka.protocol.producer import ProduceRequest  # type: ignore[import-untyped]

from magnetar.broker.ownership import NotOwnerError
from magnetar.protocols.kafka import server as kafka_server
from magnetar.protocols.kafka import wire
from magnetar.protocols.kafka.errors import ErrorCode
from magnetar.protocols.kafka.service import KafkaSettings
from tests.kafka.conftest import RawKafka, make_batch


@pytest.mark.parametrize("key", sorted(wire.SUPPORTED))
def test_every_api_has_an_error_answer(key: int) -> None:
    """At every served version, a request with default fields gets an error answer that
    decodes as that API's response and carries the code."""
    request_class, response_class, low, high = wire._APIS[key]
    for version in range(low, high + 1):
        message = request_class[version]()
        message.with_header(correlation_id=5, client_id="t")
        frame = bytes(message.encode(header=True, framed=False))
        request = wire.decode_request(frame)
        answer = wire.error_response(request, ErrorCode.NOT_COORDINATOR, "not here")
        decoded = response_class[version].decode(answer[4:], header=True)
        assert decoded.header.correlation_id == 5
        if "error_code" in _fields(response_class[version], version):
            assert decoded.error_code == ErrorCode.NOT_COORDINATOR


def _fields(container: Any, version: int) -> list[str]:
    return [n for n, f in container._struct.fields.items() if f.for_version_q(version)]


def test_fetch_and_produce_answers_echo_each_partition() -> None:
    fetch = FetchRequest[12](
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic="orders",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=0)
                    for p in (0, 3)
                ],
            )
        ],
    )
    answer = _answer(fetch, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    (topic,) = answer.responses
    assert topic.topic == "orders"
    got = [(p.partition_index, p.error_code) for p in topic.partitions]
    assert got == [(0, ErrorCode.NOT_LEADER_OR_FOLLOWER), (3, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    produce = ProduceRequest[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=2, records=b"")
                ],
            )
        ],
    )
    answer = _answer(produce, ErrorCode.UNKNOWN_SERVER_ERROR)
    (topic,) = answer.responses
    (part,) = topic.partition_responses
    assert (topic.name, part.index, part.error_code) == ("orders", 2, -1)


def _answer(message: Any, code: ErrorCode) -> Any:
    message.with_header(correlation_id=1, client_id="t")
    request = wire.decode_request(bytes(message.encode(header=True, framed=False)))
    frame = wire.error_response(request, code, "x")
    return message.header.get_response_class().decode(frame[4:], header=True)


# -- a real listener with one failing handler ------------------------------------------------


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    async def taken_over(*_: object) -> None:
        raise NotOwnerError("the bundle of orders is being taken over; retry")

    async def broken(*_: object) -> None:
        raise RuntimeError("a bug in the handler")

    monkeypatch.setitem(kafka_server.HANDLERS, wire.METADATA, taken_over)
    monkeypatch.setitem(kafka_server.HANDLERS, wire.PRODUCE, broken)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port: list[int] = []

    async def serve() -> asyncio.Server:
        server = kafka_server.KafkaServer(SimpleNamespace(), KafkaSettings(port=0))  # type: ignore[arg-type]
        listening = await loop.create_server(
            lambda: kafka_server.Connection(server), "127.0.0.1", 0
        )
        port.append(listening.sockets[0].getsockname()[1])
        return listening

    def run() -> None:
        asyncio.set_event_loop(loop)
        listening = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        listening.close()
        loop.run_until_complete(listening.wait_closed())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_refused_request_is_answered_and_the_connection_stays(listener: int) -> None:
    raw = RawKafka(listener)
    try:
        topics = [MetadataRequest.MetadataRequestTopic(name="orders", topic_id=None)]
        answer = raw.request(
            MetadataRequest[12](
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("orders", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        ]
        part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=make_batch())
        produce = ProduceRequest[7](
            transactional_id=None,
            acks=-1,
            timeout_ms=1000,
            topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[part])],
        )
        answer = raw.request(produce)
        codes = [p.error_code for p in answer.responses[0].partition_responses]
        assert codes == [ErrorCode.UNKNOWN_SERVER_ERROR]
        versions = raw.request(ApiVersionsRequest[2]())
        assert versions.error_code == 0  # the same connection still serves
    finally:
        raw.close()


def test_a_failed_acks_zero_produce_closes_the_connection(listener: int) -> None:
    """It has no answer to carry the error: closing is how Kafka tells the producer."""
    raw = RawKafka(listener)
    try:
        part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=make_batch())
        produce = ProduceRequest[7](
            transactional_id=None,
            acks=0,
            timeout_ms=1000,
            topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[part])],
        )
        produce.with_header(correlation_id=1, client_id="t")
        raw.send_bytes(bytes(produce.encode(framed=True, header=True)))
        assert raw.read_frame() is None
    finally:
        raw.close()
