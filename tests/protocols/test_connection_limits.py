"""Connection limits on a real server (issue 21): caps on connections in all and per address,
handshake and idle timeouts, back-pressure on pending publishes, the HTTP header timeout.
Each test drives a limit with raw sockets, then checks that real clients are still served.

Flooding connections come from other loopback addresses (127.0.0.2 ...), so the per-address
cap does not also refuse the real clients, which connect from 127.0.0.1.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka
import pulsar
import pytest

from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb
from magnetar.protocols.pulsar.frames import encode_command
from magnetar.testing.server import StandaloneProcess

WAIT_S = 30.0  # what should happen: fail only after this long
PER_IP, TOTAL = 8, 20  # the caps of the `capped` server
T = pb.BaseCommand.Type


def _server(tmp: Path, *flags: str) -> Iterator[StandaloneProcess]:
    server = StandaloneProcess(tmp, extra_args=list(flags))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Small connection caps; timeouts left long, so held connections stay."""
    yield from _server(
        tmp_path_factory.mktemp("capped"),
        *("--max-connections", str(TOTAL), "--max-connections-per-ip", str(PER_IP)),
    )


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Short timeouts and tiny pending limits."""
    yield from _server(
        tmp_path_factory.mktemp("strict"),
        *("--handshake-timeout-ms", "300", "--connections-max-idle-ms", "5000"),
        *("--http-idle-timeout-ms", "300"),
        *("--max-pending-publish-requests-per-connection", "4"),
        *("--max-pending-publish-bytes-per-connection", "65536"),
    )


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"{stem}-{uuid.uuid4().hex[:8]}"


# -- raw sockets -------------------------------------------------------------------------


def _open(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), WAIT_S, source_address=(source, 0))


def _closed_by_server(sock: socket.socket) -> bool:
    """Wait for the server's next bytes: True if it closed the connection instead."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def _pulsar_connect() -> bytes:
    cmd = pb.BaseCommand(type=T.CONNECT)
    cmd.connect.client_version = "raw-test"
    cmd.connect.protocol_version = 20
    return encode_command(cmd)


def _kafka_api_versions() -> bytes:
    header = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    return struct.pack(">i", len(header)) + header


def _greeted(port: int, source: str, hello: bytes) -> socket.socket | None:
    """A connection that said hello and was answered; None if the server closed it."""
    sock = _open(port, source)
    try:
        sock.sendall(hello)
        if not _closed_by_server(sock):
            return sock
    except (ConnectionResetError, BrokenPipeError):
        pass
    sock.close()
    return None


def _admitted(port: int, source: str, hello: bytes) -> bool:
    """Whether a new connection from ``source`` is served (it is closed again at once)."""
    sock = _greeted(port, source, hello)
    if sock is None:
        return False
    sock.close()
    return True


def _eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


# -- real clients ------------------------------------------------------------------------


def _messages(n: int, size: int) -> list[bytes]:
    return [b"%06d" % i + b"x" * (size - 6) for i in range(n)]


def _pulsar_round_trip(url: str, topic: str, n: int = 200, size: int = 10) -> None:
    """Produce ``n`` messages with a batching producer while a consumer on the same client
    (the same connection) receives, and check that every one arrives, in order."""
    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_max_messages=10, block_if_queue_full=True)
        results: list[pulsar.Result] = []
        sent = _messages(n, size)
        for value in sent:
            producer.send_async(value, lambda r, _: results.append(r))
        got = [consumer.receive(int(WAIT_S * 1000)).data() for _ in range(n)]
        producer.flush()
        assert results == [pulsar.Result.Ok] * n
        assert got == sent
    finally:
        client.close()


def _kafka_round_trip(
    bootstrap: str, topic: str, n: int = 200, size: int = 10, acks: str = "all"
) -> None:
    """Produce ``n`` messages to a one-partition topic with confluent-kafka, read them back."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": acks}
    )
    sent = _messages(n, size)
    for value in sent:
        producer.produce(topic, value=value)
    assert producer.flush(WAIT_S) == 0
    said = _Said()  # the consumer's own account of its group and fetches, for a failure
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "debug": "cgrp,fetch",
        },
        logger=said,
    )
    got: list[bytes] = []
    errors: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(str(msg.error()))
            received = msg.value() if msg is not None and msg.error() is None else None
            if received is not None:
                got.append(received)
    finally:
        consumer.close()
    assert got == sent, f"read {len(got)} of {n}; errors {errors[-5:]}; consumer:\n" + "\n".join(
        said.lines[-40:]
    )


class _Said:
    """A logger for librdkafka's debug lines (kept, not printed)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, msg: str, *args: object) -> None:  # logging.Logger's shape
        self.lines.append(msg % args if args else msg)


# -- caps ----------------------------------------------------------------------------------

PROTOCOLS = {
    "pulsar": (lambda s: s.pulsar_port, _pulsar_connect()),
    "kafka": (lambda s: s.kafka_port, _kafka_api_versions()),
}


def _still_served(server: StandaloneProcess, protocol: str, name: str) -> None:
    if protocol == "pulsar":
        _pulsar_round_trip(server.pulsar_url, f"persistent://public/default/{name}")
    else:
        _kafka_round_trip(f"127.0.0.1:{server.kafka_port}", name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connections_over_the_per_address_cap_are_closed(
    capped: StandaloneProcess, protocol: str, name: str
) -> None:
    port_of, hello = PROTOCOLS[protocol]
    port = port_of(capped)
    tries = [_greeted(port, "127.0.0.2", hello) for _ in range(PER_IP + 5)]
    held = [s for s in tries if s is not None]
    try:
        assert len(held) == PER_IP
        _still_served(capped, protocol, name)  # from another address
    finally:
        _close_all(held)
    # once those are closed, the address may connect again
    _eventually(lambda: _admitted(port, "127.0.0.2", hello))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connections_over_the_total_cap_are_closed(
    capped: StandaloneProcess, protocol: str, name: str
) -> None:
    port_of, hello = PROTOCOLS[protocol]
    port = port_of(capped)
    held: list[socket.socket] = []
    try:
        refused = 0
        for i in range(TOTAL + 4):  # from several addresses, each under its own cap
            sock = _greeted(port, f"127.0.0.{3 + i // PER_IP}", hello)
            if sock is None:
                refused += 1
            else:
                held.append(sock)
        assert len(held) <= TOTAL and refused >= 4
    finally:
        _close_all(held)
    # once they are closed, everyone is served again
    _eventually(lambda: _admitted(port, "127.0.0.9", hello))
    _still_served(capped, protocol, name)


# -- timeouts ------------------------------------------------------------------------------


def test_pulsar_connections_without_connect_are_closed(
    strict: StandaloneProcess, name: str
) -> None:
    connect = _pulsar_connect()
    socks = [_open(strict.pulsar_port, "127.0.0.2") for _ in range(60)]
    try:
        for sock in socks[:40]:  # a CONNECT cut short; the rest say nothing at all
            sock.sendall(connect[: len(connect) // 2])
        assert all(_closed_by_server(sock) for sock in socks)
        _pulsar_round_trip(strict.pulsar_url, f"persistent://public/default/{name}")
    finally:
        _close_all(socks)


def test_kafka_connections_without_a_request_are_closed(
    strict: StandaloneProcess, name: str
) -> None:
    request = _kafka_api_versions()
    socks = [_open(strict.kafka_port, "127.0.0.2") for _ in range(60)]
    try:
        for sock in socks[:40]:  # a request cut short; the rest say nothing at all
            sock.sendall(request[:9])
        assert all(_closed_by_server(sock) for sock in socks)
        _kafka_round_trip(f"127.0.0.1:{strict.kafka_port}", name)
    finally:
        _close_all(socks)


def test_idle_kafka_connections_are_closed(strict: StandaloneProcess, name: str) -> None:
    socks = [_greeted(strict.kafka_port, "127.0.0.2", _kafka_api_versions()) for _ in range(10)]
    held = [s for s in socks if s is not None]
    try:
        assert len(held) == 10
        held[0].sendall(_kafka_api_versions()[:9])  # a request begun, never finished
        assert all(_closed_by_server(sock) for sock in held)
        _kafka_round_trip(f"127.0.0.1:{strict.kafka_port}", name)
    finally:
        _close_all(held)


def test_http_connections_without_a_whole_header_are_closed(strict: StandaloneProcess) -> None:
    socks = [_open(strict.http_port, "127.0.0.2") for _ in range(30)]
    try:
        for sock in socks[:20]:  # slowloris: a header begun, never finished
            sock.sendall(b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert all(_closed_by_server(sock) for sock in socks)
        with urllib.request.urlopen(f"{strict.http_url}/admin/v2/tenants", timeout=WAIT_S) as r:
            assert r.status == 200
    finally:
        _close_all(socks)


# -- back-pressure -------------------------------------------------------------------------


def test_pulsar_publishes_past_the_pending_limit_all_arrive(
    strict: StandaloneProcess, name: str
) -> None:
    """4 SENDs or 64 KiB pending pause reading: 2,000 messages of 1 KB in batches of 10 pause
    it again and again, while the same connection carries the consumer's messages out."""
    _pulsar_round_trip(strict.pulsar_url, f"persistent://public/default/{name}", 2_000, 1_000)


@pytest.mark.parametrize("acks", ["all", "0"])
def test_kafka_produces_past_the_pending_limit_all_arrive(
    strict: StandaloneProcess, name: str, acks: str
) -> None:
    try:
        _kafka_round_trip(f"127.0.0.1:{strict.kafka_port}", name, 2_000, 1_000, acks)
    except AssertionError as e:  # seen once in a full run (acks=0, nothing read): say why
        said = "".join(strict.output[-40:])
        raise AssertionError(f"{str(e)[:300]}\nserver:\n{said}") from None
