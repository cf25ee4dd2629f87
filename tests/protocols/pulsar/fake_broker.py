"""A tiny Pulsar broker, built only from the codec under test.

It answers CONNECT, PARTITIONED_METADATA (0 partitions), LOOKUP (Connect to itself),
PRODUCER, SEND (keeps the entry as received; receipt at ledger 1, entry = counter),
SUBSCRIBE, FLOW (delivers every stored entry, byte for byte, as MESSAGE), ACK (silently),
CLOSE_PRODUCER, CLOSE_CONSUMER and PING, and keeps every frame it decoded. Anything else is
recorded as unexpected and answered with ERROR.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from magnetar.core.ids import MessageId
from magnetar.protocols.pulsar import responses
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import PROTOCOL_VERSION, Frame, FrameDecoder

T = pb.BaseCommand.Type
LEDGER = 1


class FakeBroker:
    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.unexpected: list[Frame] = []
        self.entries: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"pulsar://{host}:{port}"

    def commands(self, kind: int) -> list[pb.BaseCommand]:
        return [frame.command for frame in self.frames if frame.type == kind]

    def sends(self) -> list[Frame]:
        return [frame for frame in self.frames if frame.type == T.SEND]

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                for frame in decoder:
                    self.frames.append(frame)
                    writer.write(self._answer(frame))
                await writer.drain()
        except ConnectionError:
            pass  # the client went away; what it sent is recorded
        finally:
            writer.close()
            self._connections.discard(task)

    def _answer(self, frame: Frame) -> bytes:
        command = frame.command
        if frame.type == T.CONNECT:
            version = min(command.connect.protocol_version, PROTOCOL_VERSION)
            return responses.connected("Magnetar-test", protocol_version=version)
        if frame.type == T.PARTITIONED_METADATA:
            return responses.partitioned_metadata_response(command.partition_metadata.request_id, 0)
        if frame.type == T.LOOKUP:
            return responses.lookup_response(command.lookup_topic.request_id, self.url)
        if frame.type == T.PRODUCER:
            producer = command.producer
            name = producer.producer_name or f"fake-{producer.producer_id}"
            return responses.producer_success(producer.request_id, name)
        if frame.type == T.SEND:
            return self._store(frame)
        if frame.type == T.SUBSCRIBE:
            return responses.success(command.subscribe.request_id)
        if frame.type == T.FLOW:
            return self._deliver(command.flow.consumer_id)
        if frame.type == T.ACK:
            return b""
        if frame.type == T.CLOSE_PRODUCER:
            return responses.success(command.close_producer.request_id)
        if frame.type == T.CLOSE_CONSUMER:
            return responses.success(command.close_consumer.request_id)
        if frame.type == T.PING:
            return responses.pong()
        self.unexpected.append(frame)
        return responses.error(0, pb.ServerError.NotAllowedError, "not in the fake broker")

    def _store(self, frame: Frame) -> bytes:
        assert frame.payload is not None
        self.entries.append(bytes(frame.payload.raw))
        message_id = MessageId(LEDGER, len(self.entries) - 1)
        send = frame.command.send
        return responses.send_receipt(send.producer_id, send.sequence_id, message_id)

    def _deliver(self, consumer_id: int) -> bytes:
        return b"".join(
            responses.message(consumer_id, MessageId(LEDGER, entry), raw)
            for entry, raw in enumerate(self.entries)
        )
