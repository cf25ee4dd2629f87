"""A real standalone against hostile or mistaken Pulsar input, spoken by hand over a socket.

Frames are built with Magnetar's own codec (frames.py) and the generated protobuf module;
replies are read one length-prefixed frame at a time, with socket timeouts, never sleeps.
What each test checks: a broken connection is closed and only that one (a real
pulsar-client on another connection goes on working), a recoverable error is answered on
the same connection with the error the client expects, and nothing bad is stored.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count

import pulsar
import pytest
from google.protobuf.message import Message

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import (
    PROTOCOL_VERSION,
    Frame,
    decode_frame,
    encode_command,
    encode_payload_command,
    encode_raw_payload_command,
    pack_payload,
)
from magnetar.testing.server import StandaloneProcess

T = pb.BaseCommand.Type
SOCKET_TIMEOUT_S = 10.0
RECEIVE_TIMEOUT_MS = 10_000
DELIVERY_TIMEOUT_S = 5.0  # a stored message reaches a consumer with permits in milliseconds
_BODY_FIELD = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}
_topics = count()


def fresh_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{next(_topics)}-{time.monotonic_ns()}"


def command(kind: pb.BaseCommand.Type, body: Message) -> pb.BaseCommand:
    """A BaseCommand of type ``kind`` carrying ``body`` (its field number is the type)."""
    cmd = pb.BaseCommand(type=kind)
    getattr(cmd, _BODY_FIELD[kind]).CopyFrom(body)
    return cmd


def send_frame(producer_id: int, sequence_id: int, producer_name: str, data: bytes) -> bytes:
    """A SEND of one message, correctly checksummed."""
    cmd, metadata = _send_parts(producer_id, sequence_id, producer_name)
    return encode_payload_command(cmd, metadata, data)


def corrupt_send_frame(
    producer_id: int, sequence_id: int, producer_name: str, data: bytes
) -> bytes:
    """A SEND of one message whose CRC32C does not match its metadata and payload."""
    cmd, metadata = _send_parts(producer_id, sequence_id, producer_name)
    good = decode_frame(encode_payload_command(cmd, metadata, data)).payload
    assert good is not None and good.checksum is not None
    raw = pack_payload(metadata, data)
    return encode_raw_payload_command(cmd, raw, checksum=good.checksum ^ 0x5A5A5A5A)


def _send_parts(
    producer_id: int, sequence_id: int, producer_name: str
) -> tuple[pb.BaseCommand, pb.MessageMetadata]:
    body = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, num_messages=1)
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=int(time.time() * 1000),
    )
    return command(T.SEND, body), metadata


class ConnectionClosedError(Exception):
    """The server closed the raw connection."""


class RawConnection:
    """One hand-driven Pulsar connection: write frames, read frames one at a time."""

    def __init__(self, server: StandaloneProcess) -> None:
        self.sock = socket.create_connection(
            ("127.0.0.1", server.pulsar_port), timeout=SOCKET_TIMEOUT_S
        )
        self._request_ids = count(1)

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_command(self, cmd: pb.BaseCommand) -> None:
        self.send(encode_command(cmd))

    def request_id(self) -> int:
        return next(self._request_ids)

    def read_frame(self) -> Frame:
        """The next frame; raises ConnectionClosedError at end of stream, TimeoutError if
        nothing complete arrives within the socket timeout."""
        head = self._read_exactly(4)
        (total,) = struct.unpack(">I", head)
        return decode_frame(head + self._read_exactly(total))

    def expect(self, kind: int) -> pb.BaseCommand:
        frame = self.read_frame()
        assert frame.type == kind, f"expected {T.Name(kind)}, got {frame.command}"
        return frame.command

    def assert_closed_by_server(self) -> None:
        """The server closes the connection (reset or end of stream) within the timeout."""
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return
            if not data:
                return

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionClosedError("the server closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    # -- conversations -----------------------------------------------------------------

    def handshake(self) -> None:
        connect = pb.CommandConnect(
            client_version="magnetar-raw", protocol_version=PROTOCOL_VERSION
        )
        self.send_command(command(T.CONNECT, connect))
        connected = self.expect(T.CONNECTED).connected
        assert connected.protocol_version == PROTOCOL_VERSION

    def create_producer(self, topic: str, producer_id: int) -> str:
        """Register a producer; its broker-assigned name."""
        rid = self.request_id()
        body = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=rid)
        self.send_command(command(T.PRODUCER, body))
        success = self.expect(T.PRODUCER_SUCCESS).producer_success
        assert success.request_id == rid
        return str(success.producer_name)

    def assert_healthy(self) -> None:
        """The connection still answers: PING gets a PONG."""
        self.send_command(command(T.PING, pb.CommandPing()))
        self.expect(T.PONG)


@contextmanager
def raw_connection(server: StandaloneProcess) -> Iterator[RawConnection]:
    """A raw connection past its CONNECT / CONNECTED handshake, closed on exit."""
    conn = RawConnection(server)
    try:
        conn.handshake()
        yield conn
    finally:
        conn.close()


@contextmanager
def pulsar_client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    client = pulsar.Client(
        server.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield client
    finally:
        client.close()


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every payload stored in ``topic``: appends a sentinel and reads up to it."""
    sentinel = b"sentinel-%d" % time.monotonic_ns()
    producer = client.create_producer(topic)
    try:
        producer.send(sentinel)
    finally:
        producer.close()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        seen: list[bytes] = []
        while not seen or seen[-1] != sentinel:
            seen.append(reader.read_next(RECEIVE_TIMEOUT_MS).data())
        return seen[:-1]
    finally:
        reader.close()


def round_trip(producer: pulsar.Producer, consumer: pulsar.Consumer, payload: bytes) -> None:
    producer.send(payload)
    msg = consumer.receive(RECEIVE_TIMEOUT_MS)
    consumer.acknowledge(msg)
    assert msg.data() == payload


def assert_fresh_client_works(server: StandaloneProcess) -> None:
    topic = fresh_topic("after")
    with pulsar_client(server) as client:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        round_trip(client.create_producer(topic), consumer, b"still serving")


# -- connections that must be closed --------------------------------------------------------

BROKEN_FRAMES = {
    # valid sizes, a command that is not protobuf
    "undecodable-command": struct.pack(">II", 4 + 6, 6) + b"\xff\xff\xff\xff\xff\xff",
    # a well-formed BaseCommand of type PRODUCER without its body
    "command-without-body": encode_command(pb.BaseCommand(type=T.PRODUCER)),
    # the command size points past the end of its frame
    "command-overruns-frame": struct.pack(">II", 8, 100) + b"abcd",
    # a frame too small to hold its own command size
    "size-below-minimum": struct.pack(">I", 2) + b"ab",
    # another protocol altogether
    "http-request": b"GET /admin/v2/clusters HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


@pytest.mark.parametrize("garbage", BROKEN_FRAMES.values(), ids=BROKEN_FRAMES.keys())
def test_garbage_closes_only_that_connection(standalone: StandaloneProcess, garbage: bytes) -> None:
    topic = fresh_topic("bystander")
    with pulsar_client(standalone) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        round_trip(producer, consumer, b"before")
        with raw_connection(standalone) as raw:
            raw.send(garbage)
            raw.assert_closed_by_server()
        # The bystander's connection was open throughout and still works.
        round_trip(producer, consumer, b"after")
    assert_fresh_client_works(standalone)


def test_half_sent_frame_stalls_no_one(standalone: StandaloneProcess) -> None:
    """A connection stuck in the middle of a (legal-sized) frame holds up nobody; when the
    frame completes as garbage, only that connection is closed."""
    topic = fresh_topic("bystander")
    size = 1024 * 1024
    with pulsar_client(standalone) as client, raw_connection(standalone) as raw:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        raw.send(struct.pack(">II", size, size - 4) + b"\xff" * 100)
        for i in range(3):
            round_trip(producer, consumer, b"during-%d" % i)
        raw.send(b"\xff" * (size - 4 - 100))
        raw.assert_closed_by_server()
        round_trip(producer, consumer, b"after")


OVERSIZED_FRAME = struct.pack(">I", 100 * 1024 * 1024) + b"only a few bytes"


def test_oversized_frame_closes_connection(standalone: StandaloneProcess) -> None:
    topic = fresh_topic("bystander")
    with pulsar_client(standalone) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        with raw_connection(standalone) as raw:
            raw.send(OVERSIZED_FRAME)
            raw.assert_closed_by_server()
        round_trip(producer, consumer, b"after")
    assert_fresh_client_works(standalone)
    assert standalone.proc is not None and standalone.proc.poll() is None


@pytest.mark.parametrize(
    "garbage",
    [*BROKEN_FRAMES.values(), OVERSIZED_FRAME],
    ids=[*BROKEN_FRAMES.keys(), "oversized"],
)
def test_broken_frame_is_refused_by_the_protocol_layer(
    standalone: StandaloneProcess, garbage: bytes
) -> None:
    """Closing is the connection handler's decision, logged as such, never an exception
    escaping into asyncio's transport (logged as "Fatal error: protocol.data_received()
    call failed" with a traceback, the socket force-closed)."""
    first_line = len(standalone.output)
    with raw_connection(standalone) as raw:
        peer = raw.sock.getsockname()
        raw.send(garbage)
        raw.assert_closed_by_server()
    decided = f"closing Pulsar connection {peer}"
    escaped = "Fatal error: protocol.data_received() call failed"
    # Either line is logged before the socket closes; the pump thread may still be copying.
    deadline = time.monotonic() + SOCKET_TIMEOUT_S
    log = "".join(standalone.output[first_line:])
    while decided not in log and escaped not in log and time.monotonic() < deadline:
        time.sleep(0.02)
        log = "".join(standalone.output[first_line:])
    assert escaped not in log, f"the frame's error escaped the protocol handler:\n{log}"
    assert decided in log, log


# -- errors answered on a connection that stays open ----------------------------------------


def test_bad_checksum_gets_send_error_and_is_not_stored(standalone: StandaloneProcess) -> None:
    topic = fresh_topic("checksum")
    with raw_connection(standalone) as raw:
        name = raw.create_producer(topic, producer_id=1)
        raw.send(corrupt_send_frame(1, 0, name, b"corrupted in transit"))
        error = raw.expect(T.SEND_ERROR).send_error
        assert (error.producer_id, error.sequence_id) == (1, 0)
        assert error.error == pb.ServerError.ChecksumError
        raw.send(send_frame(1, 1, name, b"intact"))
        receipt = raw.expect(T.SEND_RECEIPT).send_receipt
        assert (receipt.producer_id, receipt.sequence_id) == (1, 1)
        assert receipt.message_id.entry_id >= 0
    with pulsar_client(standalone) as client:
        assert read_all(client, topic) == [b"intact"]


@pytest.mark.parametrize("field", ["publish_time", "event_time"])
def test_a_time_beyond_int64_fails_that_message_only(
    standalone: StandaloneProcess, field: str
) -> None:
    """Pulsar sends times as uint64; one ≥ 2^63 used to end the storage flusher and hang
    every later append of the node. Now that message alone is refused."""
    topic = fresh_topic("uint64-time")
    with raw_connection(standalone) as raw:
        name = raw.create_producer(topic, producer_id=1)
        cmd, metadata = _send_parts(1, 0, name)
        setattr(metadata, field, 1 << 63)
        raw.send(encode_payload_command(cmd, metadata, b"from the far future"))
        error = raw.expect(T.SEND_ERROR).send_error
        assert (error.sequence_id, error.error) == (0, pb.ServerError.ChecksumError)
        assert field in error.message
        raw.send(send_frame(1, 1, name, b"intact"))
        assert raw.expect(T.SEND_RECEIPT).send_receipt.message_id.entry_id >= 0
    with pulsar_client(standalone) as client:
        assert read_all(client, topic) == [b"intact"]


def test_send_for_unknown_producer_gets_send_error(standalone: StandaloneProcess) -> None:
    topic = fresh_topic("unknown-producer")
    with raw_connection(standalone) as raw:
        raw.send(send_frame(42, 7, "nobody", b"from nowhere"))
        error = raw.expect(T.SEND_ERROR).send_error
        assert (error.producer_id, error.sequence_id) == (42, 7)
        raw.assert_healthy()
        name = raw.create_producer(topic, producer_id=1)
        raw.send(send_frame(1, 0, name, b"from a real producer"))
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 0
    with pulsar_client(standalone) as client:
        assert read_all(client, topic) == [b"from a real producer"]


MISSING_NAMESPACE_TOPIC = "persistent://public/nope/t"


def test_missing_namespace_fails_producer_creation(standalone: StandaloneProcess) -> None:
    with pulsar_client(standalone) as client, pytest.raises(pulsar.TopicNotFound):
        client.create_producer(MISSING_NAMESPACE_TOPIC)


def test_missing_namespace_fails_discovery(standalone: StandaloneProcess) -> None:
    with raw_connection(standalone) as raw:
        rid = raw.request_id()
        body = pb.CommandPartitionedTopicMetadata(topic=MISSING_NAMESPACE_TOPIC, request_id=rid)
        raw.send_command(command(T.PARTITIONED_METADATA, body))
        meta = raw.expect(T.PARTITIONED_METADATA_RESPONSE).partition_metadata_response
        assert meta.request_id == rid
        assert meta.response == pb.CommandPartitionedTopicMetadataResponse.LookupType.Failed
        assert meta.error == pb.ServerError.TopicNotFound
        assert "public/nope" in meta.message

        rid = raw.request_id()
        body = pb.CommandLookupTopic(topic=MISSING_NAMESPACE_TOPIC, request_id=rid)
        raw.send_command(command(T.LOOKUP, body))
        lookup = raw.expect(T.LOOKUP_RESPONSE).lookup_topic_response
        assert lookup.request_id == rid
        assert lookup.response == pb.CommandLookupTopicResponse.LookupType.Failed
        assert lookup.error == pb.ServerError.TopicNotFound
        assert "public/nope" in lookup.message
        raw.assert_healthy()


BAD_TOPIC = "persistent://public/default/bad topic!"


def test_invalid_topic_name_is_refused(standalone: StandaloneProcess) -> None:
    with raw_connection(standalone) as raw:
        rid = raw.request_id()
        meta = pb.CommandPartitionedTopicMetadata(topic=BAD_TOPIC, request_id=rid)
        raw.send_command(command(T.PARTITIONED_METADATA, meta))
        answer = raw.expect(T.PARTITIONED_METADATA_RESPONSE).partition_metadata_response
        # discovery answers NotAllowedError: pulsar-client retries InvalidTopicName lookups
        # until its timeout (errors_map.discovery_error); the message says what is wrong
        assert (answer.request_id, answer.error) == (rid, pb.ServerError.NotAllowedError)
        assert "invalid topic name 'bad topic!'" in answer.message

        rid = raw.request_id()
        raw.send_command(command(T.LOOKUP, pb.CommandLookupTopic(topic=BAD_TOPIC, request_id=rid)))
        lookup = raw.expect(T.LOOKUP_RESPONSE).lookup_topic_response
        assert (lookup.request_id, lookup.error) == (rid, pb.ServerError.NotAllowedError)
        assert "invalid topic name 'bad topic!'" in lookup.message

        rid = raw.request_id()
        producer = pb.CommandProducer(topic=BAD_TOPIC, producer_id=1, request_id=rid)
        raw.send_command(command(T.PRODUCER, producer))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (rid, pb.ServerError.InvalidTopicName)

        rid = raw.request_id()
        subscribe = pb.CommandSubscribe(
            topic=BAD_TOPIC,
            subscription="s",
            sub_type=pb.CommandSubscribe.SubType.Exclusive,
            consumer_id=1,
            request_id=rid,
        )
        raw.send_command(command(T.SUBSCRIBE, subscribe))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (rid, pb.ServerError.InvalidTopicName)
        assert "bad topic!" in error.message
        raw.assert_healthy()


NOT_UTF8 = b"persistent://public/default/\xff\xfe\xc0-not-utf-8"
PLACEHOLDER = "persistent://public/default/" + "p" * 3 + "-not-utf-8"


def with_raw_strings(
    cmd: pb.BaseCommand, placeholder: str = PLACEHOLDER, raw: bytes = NOT_UTF8
) -> bytes:
    """The frame of ``cmd`` with ``placeholder`` replaced by ``raw`` (same length): protobuf
    itself refuses to build a string field that is not UTF-8, a hostile client need not."""
    assert len(placeholder.encode()) == len(raw)
    body = cmd.SerializeToString().replace(placeholder.encode(), raw)
    return struct.pack(">II", 4 + len(body), len(body)) + body


def test_a_topic_that_is_not_utf8_is_an_invalid_name(standalone: StandaloneProcess) -> None:
    """Issue 22: such a topic raised a TypeError (a traceback in the log, UnknownError or no
    answer); now every command gets the invalid-name answer and the connection goes on."""
    logged = len(standalone.output)
    with raw_connection(standalone) as raw:
        rid = raw.request_id()
        meta = pb.CommandPartitionedTopicMetadata(topic=PLACEHOLDER, request_id=rid)
        raw.send(with_raw_strings(command(T.PARTITIONED_METADATA, meta)))
        answer = raw.expect(T.PARTITIONED_METADATA_RESPONSE).partition_metadata_response
        assert (answer.request_id, answer.error) == (rid, pb.ServerError.NotAllowedError)
        assert "not UTF-8" in answer.message

        rid = raw.request_id()
        lookup = pb.CommandLookupTopic(topic=PLACEHOLDER, request_id=rid)
        raw.send(with_raw_strings(command(T.LOOKUP, lookup)))
        found = raw.expect(T.LOOKUP_RESPONSE).lookup_topic_response
        assert (found.request_id, found.error) == (rid, pb.ServerError.NotAllowedError)

        rid = raw.request_id()
        producer = pb.CommandProducer(topic=PLACEHOLDER, producer_id=1, request_id=rid)
        raw.send(with_raw_strings(command(T.PRODUCER, producer)))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (rid, pb.ServerError.InvalidTopicName)
        assert "not UTF-8" in error.message

        rid = raw.request_id()
        subscribe = pb.CommandSubscribe(
            topic=PLACEHOLDER,
            subscription="s",
            sub_type=pb.CommandSubscribe.SubType.Exclusive,
            consumer_id=1,
            request_id=rid,
        )
        raw.send(with_raw_strings(command(T.SUBSCRIBE, subscribe)))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (rid, pb.ServerError.InvalidTopicName)

        rid = raw.request_id()
        listing = pb.CommandGetTopicsOfNamespace(namespace="public/ppp", request_id=rid)
        raw.send(
            with_raw_strings(command(T.GET_TOPICS_OF_NAMESPACE, listing), "ppp", b"\xff\xfe\xc0")
        )
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (rid, pb.ServerError.InvalidTopicName)
        raw.assert_healthy()
    assert not [line for line in standalone.output[logged:] if "Traceback" in line]
    assert_fresh_client_works(standalone)


def test_second_exclusive_consumer_is_busy(standalone: StandaloneProcess) -> None:
    topic = fresh_topic("exclusive")
    with pulsar_client(standalone) as first_client, pulsar_client(standalone) as second_client:
        first = first_client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
        producer = first_client.create_producer(topic)
        round_trip(producer, first, b"before")
        with pytest.raises(pulsar.ConsumerBusy):
            second_client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
        with pytest.raises(pulsar.ConsumerBusy):
            first_client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
        for i in range(3):
            round_trip(producer, first, b"after-%d" % i)


_AckType = pb.CommandAck.AckType
BogusId = Callable[[pb.MessageIdData], tuple[int, int]]
BOGUS_ACKS: dict[str, tuple[pb.CommandAck.AckType, BogusId]] = {
    # cumulative, 50 positions past the last message of the current segment
    "cumulative-past-the-end": (_AckType.Cumulative, lambda m: (m.ledger_id, m.entry_id + 50)),
    # cumulative, on a segment id the topic has never had (above every real one)
    "cumulative-unknown-ledger": (_AckType.Cumulative, lambda m: (m.ledger_id + 10**6, 0)),
    # individual, on the position the second message sent after it will take
    "individual-past-the-end": (_AckType.Individual, lambda m: (m.ledger_id, m.entry_id + 2)),
}


@pytest.mark.parametrize("ack_type, bogus_id", BOGUS_ACKS.values(), ids=BOGUS_ACKS.keys())
def test_ack_of_a_message_never_stored_skips_nothing_later(
    standalone: StandaloneProcess, ack_type: pb.CommandAck.AckType, bogus_id: BogusId
) -> None:
    """An ACK naming a message that does not exist must not acknowledge messages that
    arrive later (Pulsar refuses a mark-delete beyond the last entry)."""
    topic = fresh_topic("bogus-ack")
    with pulsar_client(standalone) as client, raw_connection(standalone) as raw:
        producer = client.create_producer(topic)
        producer.send(b"stored")
        rid = raw.request_id()
        subscribe = pb.CommandSubscribe(
            topic=topic,
            subscription="s",
            sub_type=pb.CommandSubscribe.SubType.Exclusive,
            consumer_id=1,
            request_id=rid,
            initial_position=pb.CommandSubscribe.InitialPosition.Earliest,
        )
        raw.send_command(command(T.SUBSCRIBE, subscribe))
        assert raw.expect(T.SUCCESS).success.request_id == rid
        raw.send_command(command(T.FLOW, pb.CommandFlow(consumer_id=1, message_permits=100)))
        seen = raw.expect(T.MESSAGE).message.message_id
        ledger_id, entry_id = bogus_id(seen)
        ack = pb.CommandAck(
            consumer_id=1,
            ack_type=ack_type,
            message_id=[pb.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)],
        )
        raw.send_command(command(T.ACK, ack))
        raw.assert_healthy()
        later = [b"later-%d" % i for i in range(3)]
        for m in later:
            producer.send(m)
        delivered: list[bytes] = []
        raw.sock.settimeout(DELIVERY_TIMEOUT_S)
        for _ in later:
            try:
                frame = raw.read_frame()
            except TimeoutError:
                pytest.fail(f"only {delivered} delivered: the bogus ACK acknowledged the rest")
            assert frame.type == T.MESSAGE and frame.payload is not None, frame.command
            delivered.append(bytes(frame.payload.data))
        assert delivered == later
