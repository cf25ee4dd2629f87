"""The writer's side of the storage-node protocol: one connection per node, many requests
in flight on it, and the directory of registered nodes (``/storage-nodes``)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from magnetar.cluster.errors import NodeUnavailableError
from magnetar.cluster.node import NODES_PATH, READ_WRITE
from magnetar.cluster.wire import FrameError, Op, Status, frame, read_frame
from magnetar.meta import MetadataStore

log = logging.getLogger(__name__)

QUARANTINE_S = 30.0


class NodeConnection:
    """Requests to one storage node; answers matched by request id. A lost connection or a
    timeout fails every request waiting on it (NodeUnavailableError) and the next request
    connects again."""

    def __init__(
        self,
        node_id: str,
        host: str,
        port: int,
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.node_id, self.host, self.port, self.timeout = node_id, host, port, timeout
        self.ssl_context = ssl_context  # set: the node speaks TLS
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[tuple[Status, bytes]]] = {}
        self._ids = itertools.count(1)
        self._connecting = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, ssl=self.ssl_context),
                    self.timeout,
                )
            except ssl.SSLError as e:  # an OSError too: say it is TLS, and what to check
                raise NodeUnavailableError(
                    f"storage node {self.node_id}: TLS handshake failed ({e.reason or e}); "
                    "check broker_client_trust_certs_file and, if the node requires one, "
                    "broker_client_certificate_file"
                ) from None
            except (OSError, TimeoutError) as e:
                raise NodeUnavailableError(
                    f"storage node {self.node_id} unreachable: {e or type(e).__name__}"
                ) from None
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_answers(reader, writer))
            return writer

    async def _read_answers(self, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                _, rid, body = await read_frame(reader)
                fut = self._waiting.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result((Status(body[0]), body[1:]))
        except (asyncio.IncompleteReadError, ConnectionError, FrameError, OSError):
            pass
        finally:
            self._drop(w, "connection lost")

    def _drop(self, writer: asyncio.StreamWriter, why: str) -> None:
        if self._writer is writer:
            self._writer = None
        writer.close()
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(NodeUnavailableError(f"storage node {self.node_id}: {why}"))

    async def call(self, op: Op, body: bytes, timeout: float | None = None) -> tuple[Status, bytes]:
        """Send one request; its (status, answer). Raises NodeUnavailableError."""
        writer = await self._connect()
        rid = next(self._ids) & 0xFFFFFFFF
        fut: asyncio.Future[tuple[Status, bytes]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        writer.write(frame(op, rid, body))
        try:
            return await asyncio.wait_for(fut, timeout or self.timeout)
        except TimeoutError:
            # A node that stops answering is treated as gone: fail everything on this
            # connection, so the writer changes its ensemble once, not per request.
            self._drop(writer, f"no answer within {timeout or self.timeout:.1f} s")
            raise NodeUnavailableError(
                f"storage node {self.node_id}: no answer within {timeout or self.timeout:.1f} s"
            ) from None

    async def aclose(self) -> None:
        if self._writer is not None:
            self._drop(self._writer, "closed")
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(BaseException):
                await self._reader_task


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    address: str
    port: int
    free_bytes: int
    mode: str
    pid: int = 0
    flight: int = 0  # its Arrow Flight port (0: none)
    tls: bool = False  # its node port speaks TLS

    @property
    def writable(self) -> bool:
        return self.mode == READ_WRITE


class NodeDirectory:
    """The registered storage nodes (kept current by a watch) and a connection to each."""

    def __init__(
        self,
        meta: MetadataStore,
        timeout: float,
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.meta = meta
        self.timeout = timeout
        self._tls = tls  # makes the context of connections to nodes that speak TLS
        self._ssl_context: ssl.SSLContext | None = None
        self.nodes: dict[str, NodeInfo] = {}
        self._conns: dict[str, NodeConnection] = {}
        self._cancel_watch: Callable[[], None] | None = None
        self._refreshing: asyncio.Task[None] | None = None
        # nodes that failed a request: not picked for ensembles for QUARANTINE_S, unless
        # they register again (a restarted process) — BookKeeper's bookie quarantine
        self._suspects: dict[str, tuple[float, int]] = {}
        self.gone_since: dict[str, float] = {}  # registered once, not now (monotonic time)

    async def start(self) -> None:
        await self.refresh()
        self._cancel_watch = self.meta.watch(NODES_PATH, lambda _n: self._schedule())

    def _schedule(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        found: dict[str, NodeInfo] = {}
        for child in await self.meta.list_children(NODES_PATH):
            node = await self.meta.get(f"{NODES_PATH}/{child}")
            if node is None or not node.value:
                continue
            d = json.loads(node.value)
            found[child] = NodeInfo(
                child,
                d["address"],
                d["port"],
                d["freeBytes"],
                d["mode"],
                d.get("pid", 0),
                d.get("flight", 0),
                bool(d.get("tls", False)),
            )
        now = time.monotonic()
        for node_id in self.nodes.keys() - found.keys():
            self.gone_since.setdefault(node_id, now)
        for node_id in found:
            self.gone_since.pop(node_id, None)
        self.nodes = found

    def gone_for(self, node_id: str) -> float:
        """Seconds ``node_id`` has been unregistered (0 while registered). A node never seen
        by this process counts from the process's first look."""
        if node_id in self.nodes:
            return 0.0
        since = self.gone_since.setdefault(node_id, time.monotonic())
        return time.monotonic() - since

    def suspect(self, node_id: str) -> None:
        info = self.nodes.get(node_id)
        self._suspects[node_id] = (time.monotonic(), info.pid if info else 0)

    def trusted(self, node_id: str) -> bool:
        """Whether ``node_id`` is registered and did not fail lately."""
        info = self.nodes.get(node_id)
        return info is not None and self._trusted(info)

    def _trusted(self, n: NodeInfo) -> bool:
        since, pid = self._suspects.get(n.node_id, (0.0, 0))
        return n.pid != pid or time.monotonic() - since > QUARANTINE_S

    def writable(self) -> list[NodeInfo]:
        """Registered read-write nodes that did not fail lately."""
        return [n for n in self.nodes.values() if n.writable and self._trusted(n)]

    def ensemble(self, size: int) -> list[NodeInfo] | None:
        """``size`` registered read-write nodes for a new ledger, at random; None if too few.
        Nodes that failed lately are taken only to make up the number, as BookKeeper uses
        quarantined bookies when the healthy ones are too few: one that is really gone is
        written around while the ack quorum holds, and a ledger that must be opened now (a
        rollover decided before a node's failure was seen) is not refused for it."""
        trusted = self.writable()
        if len(trusted) >= size:
            return random.sample(trusted, size)
        suspects = [n for n in self.nodes.values() if n.writable and not self._trusted(n)]
        if len(trusted) + len(suspects) < size:
            return None
        chosen = trusted + random.sample(suspects, size - len(trusted))
        log.warning(
            "a new ledger takes storage node(s) %s, which failed in the last %.0f s: "
            "too few others are writable",
            ", ".join(n.node_id for n in chosen[len(trusted) :]),
            QUARANTINE_S,
        )
        return random.sample(chosen, size)

    def spares(self, exclude: Collection[str]) -> list[NodeInfo]:
        """Registered read-write nodes outside ``exclude`` that may take a failed ensemble
        member's place: those that did not fail lately, or, when there is none, those that
        did (BookKeeper's ``replaceBookie`` falls back to quarantined bookies the same
        way). A node that failed once under load is alive more often than not; without it a
        ledger whose two members both missed an add timeout would fail outright."""
        writable = [n for n in self.nodes.values() if n.writable and n.node_id not in exclude]
        trusted = [n for n in writable if self._trusted(n)]
        return trusted or writable

    def connection(self, node_id: str) -> NodeConnection:
        conn = self._conns.get(node_id)
        if conn is None:
            host, _, port = node_id.rpartition(":")
            info = self.nodes.get(node_id)
            if info is not None:
                host, port = info.address, str(info.port)
            context = self._context() if info is not None and info.tls else None
            conn = NodeConnection(node_id, host, int(port), self.timeout, context)
            self._conns[node_id] = conn
        return conn

    def _context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            make = self._tls or (lambda: ssl.create_default_context(ssl.Purpose.SERVER_AUTH))
            self._ssl_context = make()
        return self._ssl_context

    async def call(
        self, node_id: str, op: Op, body: bytes, timeout: float | None = None
    ) -> tuple[Status, bytes]:
        try:
            return await self.connection(node_id).call(op, body, timeout)
        except NodeUnavailableError:
            self.suspect(node_id)
            raise

    async def aclose(self) -> None:
        if self._cancel_watch is not None:
            self._cancel_watch()
        if self._refreshing is not None:
            self._refreshing.cancel()
        for conn in self._conns.values():
            await conn.aclose()
