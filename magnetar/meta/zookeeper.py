"""The cluster :class:`MetadataStore`: Apache ZooKeeper, through ``kazoo``.

Layout. A store path ``/a/b`` is the znode ``<chroot>/a/b``. ZooKeeper needs every parent
to exist while the contract's parents are implicit, so a node's data says which it is:
a node with a value holds ``MAGIC + (version, created_ms, modified_ms) + value``; an
implicit parent holds no bytes at all. The contract's version is the one in the data (it
restarts at 0 when a node is recreated, as the contract says); ZooKeeper's own znode
version guards every write (compare-and-set), so a write that raced another one is read
again and judged again — a conditional write then fails with the contract's error.

Writes. Every put, delete and multi is one ZooKeeper transaction (``multi``): all or
nothing, durable when it returns (ZooKeeper acknowledges after a quorum logged it). A node
deleted while it has children becomes an implicit parent; implicit parents left without
children are removed after the write, and ``list_children`` never lists an empty one
(one a crash left behind).

Watches. ``watch`` hears every change made through this handle at once, in order (the
contract), and changes made by *other* processes through a recursive cache of the watched
subtree (kazoo's TreeCache): those arrive later, at least once per node changed, possibly
coalesced when a node changes several times quickly — enough for cache invalidation and
ownership hand-over, which is what clusters use them for.

Threads. kazoo is thread-based: each call runs on a small worker pool; watch callbacks run
on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError as ZkBadVersionError
from kazoo.exceptions import (
    KazooException,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    ZookeeperError,
)
from kazoo.exceptions import NodeExistsError as ZkNodeExistsError

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.errors import ClosedError, ConfigError
from magnetar.meta.base import (
    MetadataStore,
    Notification,
    Op,
    SessionState,
    Stat,
    Versioned,
    Watcher,
)
from magnetar.meta.errors import MetadataError, NodeExistsError
from magnetar.meta.rules import (
    ROOT,
    WatchRegistry,
    check_op,
    check_prefix,
    check_version,
    next_stat,
)
from magnetar.meta.zookeeper_watches import RemoteWatch, SessionWatch

T = TypeVar("T")

SCHEME = "zk://"
MAGIC = b"\x4d\x01"  # "M", layout 1
_HEADER = struct.Struct(">qqq")
CONNECT_TIMEOUT_S = 15.0
MAX_RETRIES = 100  # a write re-judged this often under contention gives up
VERSION_CACHE = 10_000  # nodes whose last write this handle remembers


def parse_url(url: str) -> tuple[str, str]:
    """``zk://h1:2181,h2:2181/chroot`` → (``h1:2181,h2:2181``, ``/chroot``)."""
    if not url.startswith(SCHEME):
        raise ConfigError("metadata_url", f"{url!r} is not a zk:// URL")
    hosts, _, chroot = url.removeprefix(SCHEME).partition("/")
    if not hosts:
        raise ConfigError("metadata_url", f"{url!r} names no ZooKeeper host: zk://host:2181/root")
    chroot = "/" + chroot.strip("/") if chroot.strip("/") else ""
    return hosts, chroot


def _is_zk_legal(ch: str) -> bool:
    """ZooKeeper refuses these in a path (PathUtils.validatePath); non-BMP characters are
    surrogate pairs to Java and refused too."""
    c = ord(ch)
    return not (c < 0x20 or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xF8FF or c >= 0xFFF0 or ch == "%")


def zk_name(component: str) -> str:
    """A path component as ZooKeeper can hold it: ``%`` and every character it refuses
    become ``%{hex}``, and the components ``.`` and ``..`` (refused) become ``%{2e}``..."""
    if component in (".", ".."):
        return "%{2e}" * len(component)
    return "".join(ch if _is_zk_legal(ch) else f"%{{{ord(ch):x}}}" for ch in component)


def store_name(zname: str) -> str:
    """The inverse of :func:`zk_name`."""
    out, i = [], 0
    while i < len(zname):
        if zname[i] == "%":
            end = zname.index("}", i)
            out.append(chr(int(zname[i + 2 : end], 16)))
            i = end + 1
        else:
            out.append(zname[i])
            i += 1
    return "".join(out)


def _encode(stat: Stat, value: bytes) -> bytes:
    return MAGIC + _HEADER.pack(stat.version, stat.created_ms, stat.modified_ms) + value


def _decode(data: bytes) -> Versioned | None:
    """None for an implicit parent (no bytes)."""
    if not data:
        return None
    if not data.startswith(MAGIC):
        raise MetadataError("a ZooKeeper node holds data Magnetar did not write")
    version, created, modified = _HEADER.unpack_from(data, len(MAGIC))
    return Versioned(data[len(MAGIC) + _HEADER.size :], Stat(version, created, modified))


@dataclass
class _Znode:
    """What a transaction being planned knows of one znode."""

    exists: bool
    data: bytes
    zversion: int
    children: int


class _Conflict(Exception):
    """Another process changed a node the transaction read: read again, judge again."""


class ZooKeeperMetadataStore(MetadataStore):
    """The contract on a ZooKeeper ensemble; see the module docstring."""

    def __init__(
        self, url: str, *, clock: Clock = SYSTEM_CLOCK, session_timeout: float = 10.0
    ) -> None:
        self.url = url
        hosts, self._chroot = parse_url(url)
        self._clock = clock
        self.session_timeout = session_timeout
        self._zk = KazooClient(hosts=hosts, timeout=session_timeout)
        self._session = SessionWatch(self)
        self._executor = ThreadPoolExecutor(4, thread_name_prefix="magnetar-zk")
        self._watches = WatchRegistry()
        self._caches: list[RemoteWatch] = []
        # What this handle last wrote to each node, with ZooKeeper's version of it: a write
        # to it again is planned without reading it first (a stale guess fails the
        # transaction's version check, and the write is read and judged again).
        self._versions: OrderedDict[str, tuple[bytes, int]] = OrderedDict()
        self._versions_lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            self._zk.start(timeout=CONNECT_TIMEOUT_S)
        except Exception as e:
            self._zk.close()
            raise MetadataError(
                f"cannot reach ZooKeeper at {hosts} within {CONNECT_TIMEOUT_S:.0f} s: {e}; "
                "check that it runs and the URL's host:port"
            ) from e
        if self._chroot:
            self._zk.ensure_path(self._chroot)
        self._zk.add_listener(self._session.on_state)

    def __repr__(self) -> str:
        return f"ZooKeeperMetadataStore({self.url!r})"

    @staticmethod
    def decode(data: bytes) -> Versioned | None:
        return _decode(data)

    # -- the contract -----------------------------------------------------------------------

    async def get(self, path: str) -> Versioned | None:
        check_prefix(path)
        return await self._call(partial(self._get, path))

    async def put(self, path: str, value: bytes, *, expected_version: int | None = None) -> Stat:
        stats = await self._write([Op(path, value, expected_version)])
        stat = stats[0]
        assert stat is not None
        return stat

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        await self._write([Op(path, None, expected_version)])

    async def list_children(self, path: str) -> list[str]:
        check_prefix(path)
        return await self._call(partial(self._list_children, path))

    async def multi(self, ops: Sequence[Op]) -> None:
        if ops:
            await self._write(list(ops))
        else:
            self._check_open()

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        self._check_open()
        check_prefix(prefix)
        self._loop = asyncio.get_running_loop()
        cancel_local = self._watches.add(prefix, callback)
        cache = self._remote_watch(prefix, callback)

        def cancel() -> None:
            cancel_local()
            if cache in self._caches:
                self._caches.remove(cache)
                cache.close()

        return cancel

    # -- what a cluster needs beyond the contract ----------------------------------------------

    async def create_ephemeral(self, path: str, value: bytes) -> Stat:
        """Create ``path`` tied to this handle's ZooKeeper session: it disappears when the
        session ends — :meth:`aclose`, the process dying, or the session expiring while
        cut off. Raises NodeExistsError if the path holds a value (someone else owns it).
        Durable and visible to every process when this returns."""
        check_op(Op(path, value, -1))
        stat = next_stat(None, self._clock.now_ms())
        data = _encode(stat, value)
        await self._call(partial(self._create, path, data, stat, ephemeral=True))
        self._watches.notify([Notification(path, "created")])
        return stat

    async def create_sequential(self, prefix: str, value: bytes) -> str:
        """Create ``<prefix><10-digit number>``, the number larger than any before under the
        same parent; returns the path. Durable when this returns."""
        check_op(Op(prefix + "0", value, -1))
        stat = next_stat(None, self._clock.now_ms())
        path = await self._call(
            partial(self._create, prefix, _encode(stat, value), stat, sequence=True)
        )
        self._watches.notify([Notification(path, "created")])
        return path

    def on_session(self, callback: Callable[[SessionState], None]) -> Callable[[], None]:
        """Call ``callback`` on the event loop when the session changes: SUSPENDED (cut
        off; it may still be alive), LOST (expired, or cut off longer than its timeout:
        ephemeral nodes are gone or about to be — stop acting as their owner now), and
        CONNECTED (connected again; after LOST a new session, with no ephemeral nodes)."""
        self._check_open()
        self._loop = asyncio.get_running_loop()
        return self._session.add(callback)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._session.close()
        for cache in self._caches:
            cache.close()
        self._caches.clear()
        self._watches.clear()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._shutdown)
        finally:
            self._executor.shutdown(wait=True)

    def _shutdown(self) -> None:
        self._zk.stop()
        self._zk.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"metadata store {self.url} is closed; open a new one")

    def _zpath(self, path: str) -> str:
        if path == ROOT:
            return self._chroot or ROOT
        return self._chroot + "".join("/" + zk_name(c) for c in path[1:].split("/"))

    def store_path(self, zpath: str) -> str:
        """The store path of a znode under the chroot."""
        rest = zpath.removeprefix(self._chroot)
        if rest in ("", ROOT):
            return ROOT
        return "".join("/" + store_name(c) for c in rest[1:].split("/"))

    async def _call(self, work: Callable[[], T]) -> T:
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._guarded, work)

    def _guarded(self, work: Callable[[], T]) -> T:
        try:
            return work()
        except (KazooException, ZookeeperError) as e:
            raise MetadataError(f"metadata store {self.url}: {type(e).__name__}: {e}") from e

    async def _write(self, ops: list[Op]) -> list[Stat | None]:
        self._check_open()
        for op in ops:
            check_op(op)
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, self._guarded, partial(self._apply_all, ops, self._clock.now_ms())
        )
        # Once committed, the change happened even if our caller is cancelled meanwhile:
        # watchers must still hear of it, so notify from the future's own callback.
        future.add_done_callback(self._notify_committed)
        stats, _ = await asyncio.shield(future)
        return stats

    def _notify_committed(
        self, future: asyncio.Future[tuple[list[Stat | None], list[Notification]]]
    ) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self._watches.notify(future.result()[1])

    # -- on a worker thread -----------------------------------------------------------------

    def _get(self, path: str) -> Versioned | None:
        if path == ROOT:
            return None
        try:
            data, _ = self._zk.get(self._zpath(path))
        except NoNodeError:
            return None
        return _decode(data)

    def _create(
        self, path: str, data: bytes, stat: Stat, *, ephemeral: bool = False, sequence: bool = False
    ) -> str:
        watches = list(self._caches)
        if not sequence:  # announced first: ZooKeeper may echo it before create returns
            for watch in watches:
                watch.expect_write(path, stat)
        try:
            created = self._zk.create(
                self._zpath(path), data, ephemeral=ephemeral, sequence=sequence, makepath=True
            )
        except ZkNodeExistsError:
            for watch in watches:
                watch.forget(path, stat)
            raise NodeExistsError(
                f"{path} already exists (another session owns it, or it has children)"
            ) from None
        created_path = self.store_path(created)
        if sequence:  # its name is known only now; an echo may already have been delivered
            for watch in watches:
                watch.expect_write(created_path, stat)
        return created_path

    def _list_children(self, path: str) -> list[str]:
        zpath = self._zpath(path)
        try:
            names = self._zk.get_children(zpath)
        except NoNodeError:
            return []
        if path == ROOT and not self._chroot:
            names = [n for n in names if n != "zookeeper"]  # ZooKeeper's own subtree
        base = zpath.rstrip("/")
        pending = [(n, self._zk.get_async(f"{base}/{n}")) for n in names]
        out = []
        for name, result in pending:
            try:
                data, zstat = result.get()
            except NoNodeError:
                continue
            if data or zstat.numChildren:  # not an empty parent a crash left behind
                out.append(store_name(name))
        return sorted(out)

    def _apply_all(
        self, ops: list[Op], now_ms: int
    ) -> tuple[list[Stat | None], list[Notification]]:
        for attempt in range(MAX_RETRIES):
            try:
                return self._try_apply(ops, now_ms, optimistic=attempt == 0)
            except _Conflict:
                continue
        raise MetadataError(
            f"metadata store {self.url}: a write raced other writers {MAX_RETRIES} times; retry"
        )

    def _try_apply(
        self, ops: list[Op], now_ms: int, *, optimistic: bool
    ) -> tuple[list[Stat | None], list[Notification]]:
        plan = _Plan(self, optimistic=optimistic)
        stats: list[Stat | None] = []
        notes: list[Notification] = []
        for op in ops:
            stat, note = plan.apply(op, now_ms)
            stats.append(stat)
            notes.append(note)
        # Announced before the commit: ZooKeeper may echo a change to our watches before
        # the commit's reply reaches this thread.
        announced = list(zip(notes, stats, strict=True))
        for watch in list(self._caches):
            for note, stat in announced:
                if stat is not None:
                    watch.expect_write(note.path, stat)
                else:
                    watch.expect_delete(note.path)
        try:
            plan.commit()
        except _Conflict:
            plan.forget_versions()
            for watch in list(self._caches):
                for note, stat in announced:
                    watch.forget(note.path, stat)
            raise
        except BaseException:
            for watch in list(self._caches):
                for note, stat in announced:
                    watch.forget(note.path, stat)
            raise
        plan.remember_versions()
        plan.prune()
        return stats, notes

    # -- watches of other processes -----------------------------------------------------------

    def _remote_watch(self, prefix: str, callback: Watcher) -> RemoteWatch:
        assert self._loop is not None
        watch = RemoteWatch(self, prefix, callback, self._loop)
        self._caches.append(watch)
        watch.start()
        return watch


class _Plan:
    """One transaction being planned: every op judged against what it would see, with the
    earlier ops of the same multi applied."""

    def __init__(self, store: ZooKeeperMetadataStore, *, optimistic: bool) -> None:
        self.store = store
        self.zk = store._zk
        self.txn = self.zk.transaction()
        self.nodes: dict[str, _Znode] = {}
        self.emptied: list[str] = []  # parents that may be left without children
        self.optimistic = optimistic  # plan from guesses; a wrong one fails the commit
        self.guessed_absent: set[str] = set()  # assumed new, under an existing parent

    def _guess(self, zpath: str, op: Op) -> _Znode | None:
        """A put's node as this handle last wrote it, or absent for a create: one round trip
        instead of two. None: read it."""
        if op.value is None or not self.optimistic or zpath in self.nodes:
            return None
        with self.store._versions_lock:
            known = self.store._versions.get(zpath)
        if known is not None:
            node = _Znode(True, known[0], known[1], 0)
        elif op.expected_version == -1:
            node = _Znode(False, b"", -1, 0)
            self.guessed_absent.add(zpath)
        else:
            return None
        self.nodes[zpath] = node
        return node

    def remember_versions(self) -> None:
        versions = self.store._versions
        with self.store._versions_lock:
            for zpath, node in self.nodes.items():
                if node.exists and node.data:
                    versions[zpath] = (node.data, node.zversion)
                    versions.move_to_end(zpath)
                else:
                    versions.pop(zpath, None)
            while len(versions) > VERSION_CACHE:
                versions.popitem(last=False)

    def forget_versions(self) -> None:
        with self.store._versions_lock:
            for zpath in self.nodes:
                self.store._versions.pop(zpath, None)

    def read(self, zpath: str) -> _Znode:
        node = self.nodes.get(zpath)
        if node is None:
            try:
                data, zstat = self.zk.get(zpath)
                node = _Znode(True, data, zstat.version, zstat.numChildren)
            except NoNodeError:
                node = _Znode(False, b"", -1, 0)
            self.nodes[zpath] = node
        return node

    def apply(self, op: Op, now_ms: int) -> tuple[Stat | None, Notification]:
        zpath = self.store._zpath(op.path)
        guessed = self._guess(zpath, op)
        node = guessed or self.read(zpath)
        current = _decode(node.data) if node.exists else None
        try:
            check_version(op.path, current.stat if current else None, op)
        except MetadataError:
            if guessed is not None:
                raise _Conflict() from None  # judge by what is really there, not a guess
            raise
        if op.value is None:
            self._delete(zpath, node)
            return None, Notification(op.path, "deleted")
        stat = next_stat(current.stat if current else None, now_ms)
        self._put(zpath, node, _encode(stat, op.value))
        return stat, Notification(op.path, "modified" if current else "created")

    def _put(self, zpath: str, node: _Znode, data: bytes) -> None:
        if node.exists:
            self.txn.set_data(zpath, data, version=node.zversion)
            node.zversion += 1
        else:
            if zpath not in self.guessed_absent:
                self._ensure_parent(zpath)
            self.txn.create(zpath, data)
            node.exists, node.zversion, node.children = True, 0, 0
        node.data = data

    def _ensure_parent(self, zpath: str) -> None:
        parent = zpath.rsplit("/", 1)[0]
        if not parent or parent == self.store._chroot:
            return
        node = self.read(parent)
        if not node.exists:
            self._ensure_parent(parent)
            self.txn.create(parent, b"")
            node.exists, node.zversion, node.children, node.data = True, 0, 0, b""
        node.children += 1

    def _delete(self, zpath: str, node: _Znode) -> None:
        if node.children:  # keep it as the implicit parent of its children
            self.txn.set_data(zpath, b"", version=node.zversion)
            node.zversion += 1
            node.data = b""
            return
        self.txn.delete(zpath, version=node.zversion)
        node.exists, node.data, node.zversion = False, b"", -1
        parent = zpath.rsplit("/", 1)[0]
        if parent and parent != self.store._chroot:
            self.read(parent).children -= 1
            self.emptied.append(parent)

    def commit(self) -> None:
        results = self.txn.commit()
        races = (ZkBadVersionError, ZkNodeExistsError, NoNodeError, NotEmptyError, RolledBackError)
        failures = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, races) for r in failures):
            raise _Conflict()
        if failures:
            raise failures[0]

    def prune(self) -> None:
        """Remove implicit parents the deletes left without children (best effort: a
        parent that gained a child or a value meanwhile stays)."""
        for zpath in self.emptied:
            while zpath and zpath != self.store._chroot:
                try:
                    data, zstat = self.zk.get(zpath)
                    if data or zstat.numChildren:
                        break
                    self.zk.delete(zpath, version=zstat.version)
                except (ZkBadVersionError, NoNodeError, NotEmptyError):
                    break
                zpath = zpath.rsplit("/", 1)[0]
