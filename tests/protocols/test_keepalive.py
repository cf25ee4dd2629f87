"""The Pulsar handshake rule and keep-alive, and the HTTP listener's connection caps (issue 21,
item 4), on a real server: a command before CONNECT is answered with an error and the
connection closed; after CONNECT an idle connection is sent PING every keep-alive interval and
closed when it does not answer, while one that answers, and pulsar-client, stay connected; the
HTTP listener closes connections over its caps as the Pulsar and Kafka listeners do."""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import Frame, FrameDecoder, encode_command
from magnetar.testing.server import StandaloneProcess

WAIT_S = 30.0  # what should happen: fail only after this long
INTERVAL = 0.5  # the server's keep-alive interval, seconds
PER_IP, TOTAL = 4, 10
T = pb.BaseCommand.Type


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    flags = ["--keep-alive-interval-seconds", str(INTERVAL)]
    flags += ["--max-connections", str(TOTAL), "--max-connections-per-ip", str(PER_IP)]
    with StandaloneProcess(tmp_path_factory.mktemp("keepalive"), extra_args=flags) as s:
        yield s


def _open(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), WAIT_S, source_address=(source, 0))


class _Reader:
    """Pulsar frames from a raw socket; None once the server closed it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder(1 << 20)

    def next(self) -> Frame | None:
        while (frame := self.decoder.next_frame()) is None:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.decoder.feed(data)
        return frame


def _command(kind: int, field: str = "", **fields: object) -> bytes:
    cmd = pb.BaseCommand(type=kind)
    body = getattr(cmd, field or T.Name(kind).lower())
    body.SetInParent()
    for key, value in fields.items():
        setattr(body, key, value)
    return encode_command(cmd)


def _connected(port: int) -> tuple[socket.socket, _Reader]:
    sock = _open(port)
    sock.sendall(_command(T.CONNECT, client_version="raw-test", protocol_version=20))
    reader = _Reader(sock)
    frame = reader.next()
    assert frame is not None and frame.type == T.CONNECTED
    return sock, reader


@pytest.mark.parametrize(
    ("command", "request_id"),
    [
        (
            _command(T.LOOKUP, "lookup_topic", topic="persistent://public/default/x", request_id=7),
            7,
        ),
        (_command(T.PING), (1 << 64) - 1),
    ],
    ids=["lookup", "ping"],
)
def test_a_command_before_connect_is_refused(
    server: StandaloneProcess, command: bytes, request_id: int
) -> None:
    with _open(server.pulsar_port) as sock:
        sock.sendall(command)
        reader = _Reader(sock)
        frame = reader.next()
        assert frame is not None and frame.type == T.ERROR
        assert frame.command.error.request_id == request_id
        assert frame.command.error.error == pb.ServerError.NotAllowedError
        assert "before CONNECT" in frame.command.error.message
        assert reader.next() is None  # then the server closes the connection


def test_a_connection_that_never_answers_a_ping_is_closed(server: StandaloneProcess) -> None:
    sock, reader = _connected(server.pulsar_port)
    with sock:
        frame = reader.next()
        assert frame is not None and frame.type == T.PING
        assert reader.next() is None  # no PONG, nothing else: closed after one interval


def test_a_connection_that_answers_pings_stays(server: StandaloneProcess) -> None:
    sock, reader = _connected(server.pulsar_port)
    with sock:
        for _ in range(4):
            frame = reader.next()
            assert frame is not None and frame.type == T.PING
            sock.sendall(_command(T.PONG))
        lookup = _command(
            T.LOOKUP, "lookup_topic", topic="persistent://public/default/x", request_id=3
        )
        sock.sendall(lookup)
        frame = reader.next()
        assert frame is not None and frame.type == T.LOOKUP_RESPONSE


def test_pulsar_client_stays_connected_across_idle_intervals(server: StandaloneProcess) -> None:
    topic = f"persistent://public/default/idle-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        before = len(server.output)
        time.sleep(8 * INTERVAL)  # idle for eight keep-alive intervals: PINGs, its PONGs
        producer.send(b"after a quiet while")
        assert consumer.receive(30_000).data() == b"after a quiet while"
        closed = [line for line in server.output[before:] if "no answer to a PING" in line]
        assert not closed, closed
    finally:
        client.close()


# -- HTTP connection caps ----------------------------------------------------------------


def _http_get(sock: socket.socket) -> bool:
    """Whether a request on ``sock`` is answered (False: the server closed it)."""
    try:
        sock.sendall(b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock.recv(65536).startswith(b"HTTP/1.1 200")
    except (ConnectionResetError, BrokenPipeError):
        return False


def _held(port: int, source: str) -> socket.socket | None:
    sock = _open(port, source)
    if _http_get(sock):
        return sock
    sock.close()
    return None


def _eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def _served(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/admin/v2/tenants", timeout=WAIT_S) as r:
            return r.status == 200
    except OSError:
        return False


def test_http_connections_over_the_caps_are_closed(server: StandaloneProcess) -> None:
    port = server.http_port
    held: list[socket.socket] = []
    try:
        tries = [_held(port, "127.0.0.2") for _ in range(PER_IP + 3)]
        held += [s for s in tries if s is not None]
        assert len(held) == PER_IP  # the address's cap
        assert _served(server.http_url)  # another address is served
        for i in range(TOTAL):  # from more addresses, each under its own cap
            sock = _held(port, f"127.0.0.{3 + i // PER_IP}")
            if sock is not None:
                held.append(sock)
        assert len(held) == TOTAL  # the listener's cap
        assert _held(port, "127.0.0.9") is None
    finally:
        for sock in held:
            sock.close()
    # once those are closed, everyone is served again
    _eventually(lambda: _served(server.http_url))
    again = _held(port, "127.0.0.2")
    assert again is not None
    again.close()
    assert any("HTTP: refusing new connections" in line for line in server.output)
