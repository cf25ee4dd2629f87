"""The bound of ``bench/tls.py``: bytes pushed through a bare asyncio server, plain and TLS.

A child process runs an asyncio server with a plain and a TLS listener (the same
certificate as the broker's) whose protocol only counts what it receives — the receive path
of the Kafka listener without the Kafka part: the socket, and for TLS Python's asyncio SSL
transport (OpenSSL through a memory BIO). A client sends ``total`` bytes in 1 MiB writes
from a thread of this process (OpenSSL in C; the GIL is released while it sends) and waits
for the server's one-byte receipt. Seconds per transfer, for each listener.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import ssl
import time
from multiprocessing.connection import Connection
from pathlib import Path

CHUNK = 1 << 20


class _Sink(asyncio.BufferedProtocol):
    """Counts bytes into one reused buffer (the cheapest receive asyncio has); answers
    one byte after each ``expect`` bytes."""

    def __init__(self, expect: int) -> None:
        self.expect, self.got = expect, 0
        self.buffer = bytearray(256 * 1024)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        self.got += nbytes
        if self.got >= self.expect and self.transport is not None:
            self.got -= self.expect
            self.transport.write(b"k")


async def _serve(cert: str, key: str, expect: int, pipe: Connection) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    plain = await loop.create_server(lambda: _Sink(expect), "127.0.0.1", 0)
    tls = await loop.create_server(lambda: _Sink(expect), "127.0.0.1", 0, ssl=context)
    ports = (plain.sockets[0].getsockname()[1], tls.sockets[0].getsockname()[1])
    pipe.send(ports)
    await loop.run_in_executor(None, pipe.recv)  # until told to stop


def _child(cert: str, key: str, expect: int, pipe: Connection) -> None:
    asyncio.run(_serve(cert, key, expect, pipe))


def _send(port: int, total: int, context: ssl.SSLContext | None) -> float:
    raw = socket.create_connection(("127.0.0.1", port))
    sock = context.wrap_socket(raw, server_hostname="localhost") if context else raw
    try:
        data = b"x" * CHUNK
        started = time.perf_counter()
        sent = 0
        while sent < total:
            sock.sendall(data[: min(CHUNK, total - sent)])
            sent += min(CHUNK, total - sent)
        assert sock.recv(1) == b"k"
        return time.perf_counter() - started
    finally:
        sock.close()


def measure(cert: Path, key: Path, trust: Path, total: int, rounds: int) -> dict[str, list[float]]:
    """Seconds to push ``total`` bytes through each listener, ``rounds`` times, alternating."""
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(
        target=_child, args=(str(cert), str(key), total, theirs), daemon=True
    )
    child.start()
    try:
        plain, tls = ours.recv()
        context = ssl.create_default_context(cafile=str(trust))
        seconds: dict[str, list[float]] = {"asyncio sink plain": [], "asyncio sink TLS": []}
        for _ in range(rounds):
            seconds["asyncio sink plain"].append(_send(plain, total, None))
            seconds["asyncio sink TLS"].append(_send(tls, total, context))
        return seconds
    finally:
        ours.send("stop")
        child.join(10)
        if child.is_alive():
            child.kill()
