"""Fixtures for the real-client broker tests: a client per test, a fresh topic per test.

Every module shares one ``standalone`` server (tests/conftest.py), so each test works on its
own topic and never depends on what another test left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import FrameDecoder, encode_command
from magnetar.testing.server import StandaloneProcess

RECEIVE_MS = 10_000  # a message that should arrive: fail only after this long
QUIET_MS = 500  # a message that should NOT arrive: how long we listen for it
T = pb.BaseCommand.Type


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    """A pulsar.Client on the module's standalone; closed after the test whatever happens."""
    c = pulsar.Client(
        standalone.pulsar_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses: the test's name plus a random suffix."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"persistent://public/default/{stem}-{uuid.uuid4().hex[:8]}"


def receive_n(consumer: pulsar.Consumer, n: int, *, ack: bool = True) -> list[pulsar.Message]:
    """Exactly ``n`` messages (each within RECEIVE_MS), acknowledged unless ``ack`` is False."""
    out = []
    for _ in range(n):
        msg = consumer.receive(RECEIVE_MS)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def drain(consumer: pulsar.Consumer, *, ack: bool = True, quiet_ms: int = QUIET_MS) -> list[bytes]:
    """Payloads of every message that arrives until none has for ``quiet_ms``."""
    out = []
    while True:
        try:
            msg = consumer.receive(quiet_ms)
        except pulsar.Timeout:
            return out
        if ack:
            consumer.acknowledge(msg)
        out.append(msg.data())


def assert_nothing_more(consumer: pulsar.Consumer | pulsar.Reader) -> None:
    """No further message arrives within QUIET_MS."""
    receive = consumer.read_next if isinstance(consumer, pulsar.Reader) else consumer.receive
    with pytest.raises(pulsar.Timeout):
        msg = receive(QUIET_MS)
        pytest.fail(f"unexpected message {msg.data()!r} ({msg.message_id()})")


def payloads(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() for i in range(n)]


class RawConnection:
    """A bare Pulsar protocol connection, for the few wire details the client hides."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, port: int) -> AsyncIterator[RawConnection]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = cls(reader, writer)
        try:
            connect = pb.CommandConnect(client_version="raw-test", protocol_version=20)
            assert (await conn.request(T.CONNECT, connect=connect)).type == T.CONNECTED
            yield conn
        finally:
            writer.close()
            await writer.wait_closed()

    async def request(self, kind: int, **body: object) -> pb.BaseCommand:
        """Send one command and return the next command the broker sends back."""
        return await self.request_raw(pb.BaseCommand(type=kind, **body))

    async def request_raw(self, command: pb.BaseCommand) -> pb.BaseCommand:
        """Send ``command`` as built and return the next command the broker sends back."""
        self.writer.write(encode_command(command))
        async with asyncio.timeout(RECEIVE_MS / 1000):
            while (frame := self.decoder.next_frame()) is None:
                data = await self.reader.read(65536)
                assert data, "the broker closed the connection"
                self.decoder.feed(data)
        return frame.command
