"""The embedded default :class:`MetadataStore`: one SQLite file.

Durability: the file runs in WAL mode with ``synchronous=FULL``, so a commit returns only
after its WAL frames are fsynced; every put, delete and multi is one committed transaction.

Threading: one dedicated worker thread owns the connection (SQLite calls block), and every
call runs there, one at a time; the event loop only awaits. Watches run on the event loop
thread once the change is committed.

Several handles (in one process or many) may open the same file; SQLite serialises their
writes, and ``BEGIN IMMEDIATE`` makes each compare-and-set read and write under one lock.
Watches see only the changes made through their own handle.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.errors import ClosedError
from magnetar.meta.base import MetadataStore, Notification, Op, Stat, Versioned, Watcher
from magnetar.meta.errors import MetadataError
from magnetar.meta.rules import (
    WatchRegistry,
    check_op,
    check_prefix,
    check_version,
    child_names,
    children_prefix,
    next_stat,
)

T = TypeVar("T")

SCHEMA_VERSION = 1  # kept in PRAGMA user_version; 0 means a new, empty file
BUSY_TIMEOUT_S = 10.0  # how long a write waits for another handle's transaction to end
_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}

_CREATE_NODES = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    modified_ms INTEGER NOT NULL
) WITHOUT ROWID
"""

_Outcome = tuple[list[Stat | None], list[Notification]]


class SqliteMetadataStore(MetadataStore):
    """The contract on one SQLite file; see the module docstring for durability and threads.

    The constructor opens (and if needed creates) the file and blocks until it is ready, so
    open stores at startup. It raises MetadataError naming the file if the file cannot be
    created or is not a Magnetar metadata database.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = Path(path)
        self._clock = clock
        self._watches = WatchRegistry()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-meta")
        try:
            self._conn = self._executor.submit(_connect, self.path).result()
        except BaseException:
            self._executor.shutdown(wait=True)
            raise

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({str(self.path)!r})"

    async def get(self, path: str) -> Versioned | None:
        """The value and stat at ``path``, or None. ``/`` is accepted and never has a value."""
        self._check_open()
        check_prefix(path)
        return await self._submit(partial(_get, path=path))

    async def put(self, path: str, value: bytes, *, expected_version: int | None = None) -> Stat:
        """Write ``value``; committed and fsynced when this returns.

        A put that reached the worker thread completes even if its caller is cancelled
        (and watchers hear of it). After a cancellation or an I/O error the caller cannot
        tell whether the put happened: re-read before retrying a versioned put.
        """
        stats = await self._write([Op(path, value, expected_version)])
        stat = stats[0]
        assert stat is not None, "a put always yields a stat"
        return stat

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        """Delete the node (not its children); committed and fsynced when this returns."""
        await self._write([Op(path, None, expected_version)])

    async def list_children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path`` (parents are implicit)."""
        self._check_open()
        check_prefix(path)
        return await self._submit(partial(_list_children, prefix=children_prefix(path)))

    async def multi(self, ops: Sequence[Op]) -> None:
        """Apply every op in one transaction, committed and fsynced when this returns.

        If an op fails, nothing is written and its error is raised.
        """
        await self._write(list(ops))

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        """Call ``callback`` after each committed change at or under ``prefix`` made through
        this handle (not through other handles on the same file).

        Callbacks run on the event loop thread, and those of a change have run by the time
        the call that made it returns.
        """
        self._check_open()
        check_prefix(prefix)
        return self._watches.add(prefix, callback)

    async def pragmas(self) -> dict[str, str]:
        """``journal_mode`` and ``synchronous`` as the live connection reports them."""
        return await self._submit(_read_pragmas)

    async def aclose(self) -> None:
        """Finish the calls already started, close the file; later calls raise ClosedError.

        Everything committed before stays durable. Closing twice is fine.
        """
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._run, sqlite3.Connection.close)
        finally:
            self._executor.shutdown(wait=True)
            self._watches.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"metadata store {self.path} is closed; open a new one")

    def _submit(self, work: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        self._check_open()
        return asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """On the worker thread: run ``work`` on the connection, naming the file on errors."""
        try:
            return work(self._conn)
        except sqlite3.Error as e:
            raise MetadataError(f"metadata store {self.path}: {e}") from e

    async def _write(self, ops: list[Op]) -> list[Stat | None]:
        self._check_open()
        for op in ops:
            check_op(op)
        future = self._submit(partial(_apply_all, ops=ops, now_ms=self._clock.now_ms()))
        # Once committed, the change happened even if our caller is cancelled meanwhile
        # (a timeout, say): watchers must still hear of it. So notify from the future's
        # own callback, and shield the future from our caller's cancellation.
        future.add_done_callback(self._notify_committed)
        stats, _ = await asyncio.shield(future)
        return stats

    def _notify_committed(self, future: asyncio.Future[_Outcome]) -> None:
        if future.cancelled() or future.exception() is not None:
            return  # nothing was committed
        self._watches.notify(future.result()[1])


# --- On the worker thread ------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    try:
        # isolation_level=None: no implicit transactions; writes say BEGIN IMMEDIATE.
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as e:
        raise MetadataError(
            f"cannot open metadata store {path}: {e}; check that its directory exists "
            "and is writable"
        ) from e
    try:
        _prepare(conn, path)
    except sqlite3.Error as e:
        conn.close()
        raise MetadataError(
            f"cannot open metadata store {path}: {e}; is it a Magnetar metadata file?"
        ) from e
    except BaseException:
        conn.close()
        raise
    return conn


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Check the file is ours (or new), then set durability and create the schema."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]  # reads the header
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if version == 0 and tables > 0:
        raise MetadataError(
            f"{path} is a SQLite database of some other program; "
            "point Magnetar at a new file or its own metadata file"
        )
    if version > SCHEMA_VERSION:
        raise MetadataError(
            f"{path} has metadata schema {version}, newer than this Magnetar knows "
            f"({SCHEMA_VERSION}); upgrade Magnetar"
        )
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal":
        raise MetadataError(
            f"cannot use write-ahead logging on {path} (journal mode stays {mode!r}); "
            "put the metadata file on a local filesystem"
        )
    conn.execute("PRAGMA synchronous=FULL")  # WAL + FULL: each commit fsyncs the WAL
    if version == 0:
        _in_transaction(conn, _create_schema)


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute(_CREATE_NODES)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _in_transaction(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` in one write transaction: committed when this returns, else rolled back."""
    conn.execute("BEGIN IMMEDIATE")  # take the write lock now, so reads in work stay valid
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT may already have rolled back
            conn.execute("ROLLBACK")
        raise
    return result


def _apply_all(conn: sqlite3.Connection, *, ops: Sequence[Op], now_ms: int) -> _Outcome:
    def apply(conn: sqlite3.Connection) -> _Outcome:
        stats: list[Stat | None] = []
        notes: list[Notification] = []
        for op in ops:
            stat, note = _apply(conn, op, now_ms)
            stats.append(stat)
            notes.append(note)
        return stats, notes

    return _in_transaction(conn, apply)


def _apply(conn: sqlite3.Connection, op: Op, now_ms: int) -> tuple[Stat | None, Notification]:
    row = conn.execute(
        "SELECT version, created_ms, modified_ms FROM nodes WHERE path = ?", (op.path,)
    ).fetchone()
    current = Stat(*row) if row else None
    check_version(op.path, current, op)
    if op.value is None:
        conn.execute("DELETE FROM nodes WHERE path = ?", (op.path,))
        return None, Notification(op.path, "deleted")
    stat = next_stat(current, now_ms)
    conn.execute(
        "INSERT OR REPLACE INTO nodes (path, value, version, created_ms, modified_ms)"
        " VALUES (?, ?, ?, ?, ?)",
        (op.path, op.value, stat.version, stat.created_ms, stat.modified_ms),
    )
    return stat, Notification(op.path, "created" if current is None else "modified")


def _get(conn: sqlite3.Connection, *, path: str) -> Versioned | None:
    row = conn.execute(
        "SELECT value, version, created_ms, modified_ms FROM nodes WHERE path = ?", (path,)
    ).fetchone()
    return Versioned(bytes(row[0]), Stat(*row[1:])) if row else None


def _list_children(conn: sqlite3.Connection, *, prefix: str) -> list[str]:
    # prefix ends with "/"; "0" is the next character after "/", and paths compare as
    # UTF-8 bytes, so [prefix, end) holds exactly the paths that start with prefix.
    end = prefix[:-1] + "0"
    rows = conn.execute("SELECT path FROM nodes WHERE path >= ? AND path < ?", (prefix, end))
    return child_names(prefix, (path for (path,) in rows))


def _read_pragmas(conn: sqlite3.Connection) -> dict[str, str]:
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": mode, "synchronous": _SYNCHRONOUS_NAMES.get(synchronous, "?")}
