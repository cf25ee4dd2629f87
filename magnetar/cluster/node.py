"""``magnetar storage-node``: a process that stores entries of many replicated ledgers.

Each ledger is a partition of the node's own storage engine (journal with group commit and
fsync before the answer, segment files, indexes, crash recovery), named ``L<ledger id>``,
kept by a :class:`~magnetar.storage.ledger_store.LedgerStore` (the per-ledger index, fences,
reads and checks; this module adds the wire around it); the engine's catalog is a SQLite
file in the node's data directory, so nothing a node keeps is shared. A stored record
carries its ledger entry id: a node may hold any subset of a ledger's entries (striping,
ensemble changes, recovery write-backs), in any order.

A node fences a ledger on request (BookKeeper's fencing read): the flag is on disk before
the answer, adds in flight finish first, and every later add of that ledger is refused with
FENCED unless it comes from a recoverer. It registers itself as an ephemeral node
``/storage-nodes/<host:port>`` with its free space and mode, and turns read-only (answers
READ_ONLY to adds, still serves reads) when free space drops below its threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil

from magnetar.cluster.node_flight import NodeFlightServer
from magnetar.cluster.quarantine import Quarantine, open_engine
from magnetar.cluster.wire import (
    ADD,
    FLAG_RECOVERY,
    INDEX_ROW,
    LAC,
    LEDGER,
    READ,
    FrameError,
    Op,
    Status,
    frame,
    pack_damaged,
    pack_records,
    read_frame,
)
from magnetar.core import formats
from magnetar.core.config import Settings
from magnetar.core.errors import ConfigError
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.meta.base import SessionState
from magnetar.storage import StorageEngine
from magnetar.storage.errors import DiskFullError, FencedError, StorageError
from magnetar.storage.ledger_records import Record
from magnetar.storage.ledger_store import LedgerStore, StoredLedger

log = logging.getLogger(__name__)

NODES_PATH = "/storage-nodes"
READ_WRITE, READ_ONLY = "read-write", "read-only"
REPORT_INTERVAL = 2.0  # seconds between free-space checks / registration updates


class StorageNode:
    """One storage node: serve adds, reads and fences; register in the metadata store."""

    def __init__(self, settings: Settings, store: LedgerStore, meta: MetadataStore) -> None:
        self.settings = settings
        self.store = store
        self.engine: StorageEngine = store.engine
        self.meta = meta
        self.address = f"{settings.advertised_address or settings.bind_address}"
        self.port = settings.storage_port
        self.mode = READ_WRITE
        self.quarantine = Quarantine(settings.data_dir)  # ledgers set aside at start
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._conns: set[asyncio.StreamWriter] = set()
        self._stop_session: object = None
        self._catalog: MetadataStore | None = None
        self.flight: NodeFlightServer | None = None

    @property
    def node_id(self) -> str:
        return f"{self.address}:{self.port}"

    @classmethod
    async def start(cls, settings: Settings) -> StorageNode:
        if not settings.metadata_url.startswith("zk://"):
            raise ConfigError(
                "metadata_url",
                "a storage node registers in the cluster's ZooKeeper: "
                "pass --metadata-url zk://HOST:PORT[/chroot]",
            )
        # its Flight reads decode entries: bounded by the cluster's message size, not the default
        formats.limit_message_size(settings.max_message_size)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        local = settings.replace(metadata_url=f"sqlite:///{settings.data_dir / 'catalog.db'}")
        catalog = open_metadata_store(local.metadata)
        quarantine = Quarantine(settings.data_dir)
        engine = await open_engine(local, catalog, quarantine)
        try:
            store = await LedgerStore.open(engine, settings.data_dir / "fenced.json")
        except BaseException:
            await engine.aclose()
            await catalog.aclose()
            raise
        meta = open_metadata_store(settings.metadata_url)
        node = cls(settings, store, meta)
        node._catalog = catalog
        node.quarantine = quarantine
        try:
            tls = settings.tls_files  # the node port speaks TLS (mTLS with a trust file)
            node._server = await asyncio.start_server(
                node._serve,
                settings.bind_address,
                settings.storage_port,
                ssl=tls.server_context() if tls is not None else None,
            )
            node.port = node._server.sockets[0].getsockname()[1]
            if tls is None:  # a TLS node serves no clear-text reads: Spark goes via brokers
                node.flight = NodeFlightServer(
                    node,
                    asyncio.get_running_loop(),
                    f"grpc://{settings.bind_address}:{settings.flight_port}",
                )
                node.flight.start()
            await node._register()
            node._tasks.append(asyncio.create_task(node._report_loop()))
            node._stop_session = meta.on_session(node._on_session)  # type: ignore[attr-defined]
        except BaseException:
            await node.aclose()
            raise
        return node

    def ledger(self, ledger_id: int) -> StoredLedger | None:
        return self.store.ledger(ledger_id)

    async def read_records(self, ledger_id: int, eids: list[int]) -> list[Record]:
        """The records of ``eids`` (held here), in that order."""
        return await self.store.read_records(ledger_id, eids)

    # -- registration -------------------------------------------------------------------

    def _describe(self) -> bytes:
        free = shutil.disk_usage(self.settings.data_dir).free
        return json.dumps(
            {
                "id": self.node_id,
                "address": self.address,
                "port": self.port,
                "freeBytes": free,
                "flight": self.flight.port if self.flight is not None else 0,
                "flightStreams": self.flight.streams if self.flight is not None else 0,
                "mode": self.mode,
                "tls": self.settings.tls_enabled,  # brokers connect with TLS
                "ledgers": len(self.store),
                "pid": os.getpid(),
            }
        ).encode()

    async def _register(self) -> None:
        path = f"{NODES_PATH}/{self.node_id}"
        with contextlib.suppress(Exception):
            await self.meta.put(NODES_PATH, b"", expected_version=-1)
        existing = await self.meta.get(path)
        if existing is not None:  # our own node from a session that has not expired yet
            with contextlib.suppress(Exception):
                await self.meta.delete(path)
        await self.meta.create_ephemeral(path, self._describe())  # type: ignore[attr-defined]

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.CONNECTED:
            self._tasks.append(asyncio.create_task(self._reregister()))

    async def _reregister(self) -> None:
        try:
            if await self.meta.get(f"{NODES_PATH}/{self.node_id}") is None:
                await self._register()
        except Exception as e:  # retried by the report loop
            log.warning("storage node %s: registering again failed: %s", self.node_id, e)

    async def _report_loop(self) -> None:
        path = f"{NODES_PATH}/{self.node_id}"
        while True:
            await asyncio.sleep(REPORT_INTERVAL)
            try:
                free = shutil.disk_usage(self.settings.data_dir).free
                mode = READ_ONLY if free < self.settings.storage_min_free_bytes else READ_WRITE
                if mode != self.mode:
                    log.warning("storage node %s is now %s (%d bytes free)", path, mode, free)
                    self.mode = mode
                node = await self.meta.get(path)
                if node is None:
                    await self._register()
                else:
                    await self.meta.put(path, self._describe(), expected_version=node.stat.version)
            except Exception as e:
                log.warning("storage node %s: registration update failed: %s", self.node_id, e)

    # -- serving ------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                op, rid, body = await read_frame(reader)
                task = asyncio.create_task(self._answer(writer, op, rid, body))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, FrameError) as e:
            if isinstance(e, FrameError):
                log.warning("storage node: closing a connection: %s", e)
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, op: int, rid: int, body: bytes) -> None:
        try:
            status, answer = await self._handle(op, body)
        except DiskFullError as e:
            self.mode = READ_ONLY
            status, answer = Status.READ_ONLY, str(e).encode()
        except Exception as e:  # one bad request never takes the node down
            log.exception("storage node: request %d failed", op)
            status, answer = Status.ERROR, f"{type(e).__name__}: {e}".encode()
        if not writer.is_closing():
            writer.write(frame(op, rid, bytes([status]) + answer))

    async def _handle(self, op: int, body: bytes) -> tuple[Status, bytes]:
        if op == Op.ADD:
            ledger_id, lac, flags = ADD.unpack_from(body)
            return await self._add(ledger_id, lac, flags, Record.unpack(body[ADD.size :]))
        if op == Op.READ:
            return await self._read(*READ.unpack_from(body))
        (ledger_id,) = LEDGER.unpack_from(body) if body else (0,)
        if op == Op.FENCE:
            return await self._fence(ledger_id)
        if op == Op.LAC:
            confirmed = self.store.last_confirmed(ledger_id)
            if confirmed is None:
                return Status.NO_LEDGER, LAC.pack(-1, -1)
            return Status.OK, LAC.pack(*confirmed)
        if op == Op.INDEX:
            ledger = self.store.ledger(ledger_id)
            if ledger is None:
                return Status.NO_LEDGER, b""
            rows = (INDEX_ROW.pack(eid, *ledger.rows[eid][1:]) for eid in ledger.ids)
            return Status.OK, b"".join(rows)
        if op == Op.DELETE:
            return await self._delete(ledger_id)
        if op == Op.CHECK:
            return await self._check(ledger_id)
        if op == Op.PING:
            return Status.OK, b""
        return Status.ERROR, f"unknown op {op}".encode()

    async def _add(self, ledger_id: int, lac: int, flags: int, r: Record) -> tuple[Status, bytes]:
        recovery = bool(flags & FLAG_RECOVERY)
        if self.store.is_fenced(ledger_id) and not recovery:
            return Status.FENCED, f"ledger {ledger_id} is fenced".encode()
        if self.mode == READ_ONLY:
            return Status.READ_ONLY, f"storage node {self.node_id} is read-only".encode()
        try:
            await self.store.add(ledger_id, r, lac=lac, recovery=recovery)
        except FencedError as e:  # fenced while this add waited for an earlier copy of it
            return Status.FENCED, str(e).encode()
        return Status.OK, b""

    async def _read(
        self, ledger_id: int, first: int, last: int, max_bytes: int
    ) -> tuple[Status, bytes]:
        """Records ``first``, ``first + 1``, … while this node holds them, up to ``last``."""
        ledger = self.store.ledger(ledger_id)
        aside = self.quarantine.ledgers.get(ledger_id)
        if aside is not None and (ledger is None or first not in ledger.rows):
            problem = f"storage node {self.node_id}: ledger {ledger_id} was set aside: {aside}"
            return Status.DAMAGED, pack_damaged(problem, [])
        got = await self.store.read(ledger_id, first, last, max_bytes)
        if got is None:
            return Status.NO_ENTRY, b""
        if got.damaged_at is not None:
            problem = self._damage(ledger_id, got.damaged_at)
            return Status.DAMAGED, pack_damaged(problem, got.records)
        return Status.OK, pack_records(got.records)

    def _damage(self, ledger_id: int, eid: int) -> str:
        ledger = self.store.ledger(ledger_id)
        assert ledger is not None
        return (
            f"storage node {self.node_id}: entry {eid} of ledger {ledger_id} is not readable here "
            f"({ledger.damaged})"
        )

    async def _check(self, ledger_id: int) -> tuple[Status, bytes]:
        """Read every entry held of the ledger, verifying each checksum (a scrub). Answers
        ``{"entries": held, "damaged": [entry ids unreadable here], "problem": text}``."""
        aside = self.quarantine.ledgers.get(ledger_id)
        if self.store.ledger(ledger_id) is None and aside is not None:
            # every entry it should hold is missing
            return Status.OK, json.dumps({"entries": 0, "damaged": [], "problem": aside}).encode()
        answer = await self.store.check(ledger_id)
        if answer is None:
            return Status.NO_LEDGER, b""
        return Status.OK, json.dumps(answer).encode()

    async def _fence(self, ledger_id: int) -> tuple[Status, bytes]:
        ledger = await self.store.fence(ledger_id)
        if ledger is None:
            return Status.OK, LAC.pack(-1, -1)
        return Status.OK, LAC.pack(ledger.lac, ledger.last)

    async def _delete(self, ledger_id: int) -> tuple[Status, bytes]:
        await asyncio.to_thread(self.quarantine.discard, ledger_id)
        await self.store.delete(ledger_id)
        return Status.OK, b""

    # -- lifecycle ----------------------------------------------------------------------

    def describe(self) -> str:
        return (
            f"magnetar storage-node ready: {self.node_id}, data in "
            f"{self.settings.data_dir.resolve()}, {len(self.store)} ledger(s), flight "
            f"grpc://{self.address}:{self.flight.port if self.flight else 0}, "
            f"metadata {self.settings.metadata_url}, {self._security()}"
        )

    def _security(self) -> str:
        s = self.settings
        if not s.tls_enabled:
            return "node port in clear text (--tls-enabled to encrypt it)"
        if s.tls_require_trusted_client_cert:
            return "node port TLS, only clients with a trusted certificate (mTLS)"
        return "node port TLS"

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.flight is not None:
            await asyncio.to_thread(self.flight.stop)
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            w.close()
        with contextlib.suppress(Exception):
            await self.meta.aclose()
        with contextlib.suppress(StorageError):
            await self.engine.aclose()
        if self._catalog is not None:
            with contextlib.suppress(Exception):
                await self._catalog.aclose()


async def serve(settings: Settings, announce: object = print) -> None:
    """Run a storage node until SIGINT or SIGTERM."""
    import signal

    node = await StorageNode.start(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        announce(node.describe())  # type: ignore[operator]
        await stop.wait()
    finally:
        await node.aclose()
