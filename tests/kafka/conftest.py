"""Fixtures for the Kafka protocol tests: the module's standalone server, a fresh topic per
test, and a bare protocol connection for the wire details the clients hide."""

from __future__ import annotations

import re
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# Imported before any test module imports kafka-python: wire.py silences the deprecation
# warning kafka-python's schema loading raises on Python 3.11 (warnings are errors here).
from magnetar.protocols.kafka import records, wire  # noqa: F401
from magnetar.testing.server import StandaloneProcess

from kafka.protocol.consumer import ListOffsetsRequest  # isort: skip
from kafka.protocol.producer import ProduceRequest  # isort: skip

TIMEOUT_S = 20.0  # a record that should arrive: fail only after this long
TS = 1_700_000_000_000


def offloading_server(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> Iterator[StandaloneProcess]:
    """A module's own standalone that offloads quickly: segments of 4 entries, closed ones
    offloaded within 0.2 s (a fixture body: ``yield from`` it)."""
    proc = StandaloneProcess(
        tmp_path_factory.mktemp(name),
        ["--segment-max-entries", "4", "--offload-check-interval", "0.2"],
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def bootstrap(standalone: StandaloneProcess) -> str:
    return f"127.0.0.1:{standalone.kafka_port}"


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses: the test's name plus a random suffix."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"{stem}-{uuid.uuid4().hex[:8]}"


class RawKafka:
    """A bare Kafka connection speaking kafka-python's protocol classes, one request at a
    time — for wire details (errors, sequences, bad bytes) the clients hide."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.correlation_id = 0

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, message: Any) -> Any:
        """Send ``message`` (a versioned kafka.protocol request) and decode the answer."""
        self.correlation_id += 1
        message.with_header(correlation_id=self.correlation_id, client_id="raw-test")
        self.sock.sendall(bytes(message.encode(framed=True, header=True)))
        frame = self.read_frame()
        assert frame is not None, "the server closed the connection"
        response_class = message.header.get_response_class()
        response = response_class.decode(frame, header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def read_frame(self) -> bytes | None:
        """The next response frame (without its size); None when the server closed."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def produce(self, topic: str, data: bytes, *, acks: int = -1) -> tuple[int, int]:
        """Produce ``data`` (a records field) to partition 0: (error code, base offset)."""
        part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=data)
        request = ProduceRequest[7](
            transactional_id=None,
            acks=acks,
            timeout_ms=10_000,
            topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[part])],
        )
        answer = self.request(request).responses[0].partition_responses[0]
        return answer.error_code, answer.base_offset

    def end_offset(self, topic: str) -> int:
        """ListOffsets LATEST of partition 0 (-1 when the topic is unknown)."""
        part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=-1
        )
        topics = [ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])]
        return int(
            self.request(ListOffsetsRequest[1](replica_id=-1, topics=topics))
            .topics[0]
            .partitions[0]
            .offset
        )

    def close(self) -> None:
        self.sock.close()


def make_batch(n: int = 3, **header: int) -> bytes:
    """A magic-2 batch of ``n`` records (``header``: producer id, epoch, base sequence)."""
    return records.encode([records.Record(b"k", b"v%d" % i, TS + i) for i in range(n)], **header)


@pytest.fixture
def raw(standalone: StandaloneProcess) -> Iterator[RawKafka]:
    conn = RawKafka(standalone.kafka_port)
    try:
        yield conn
    finally:
        conn.close()
