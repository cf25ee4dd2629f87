"""The default state store: one SQLite file under the data dir (WAL, synchronous=FULL).

Shape (read it with ``sqlite3 DATA_DIR/views/state.db``)::

    mv_<dataset>(key TEXT PRIMARY KEY, value TEXT)       -- value: the row as JSON
    mv_<view>                                             -- a VIEW on the current dataset
    magnetar_positions(dataset TEXT PRIMARY KEY, batch_id INTEGER, offsets TEXT,
                       committed_ms INTEGER, epoch INTEGER)
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from magnetar.views.errors import StateStoreError, ViewFencedError
from magnetar.views.model import Offsets, Position, encode_row
from magnetar.views.stores.base import StateStore

POSITIONS = """CREATE TABLE IF NOT EXISTS magnetar_positions (
    dataset TEXT PRIMARY KEY, batch_id INTEGER NOT NULL, offsets TEXT NOT NULL,
    committed_ms INTEGER NOT NULL, epoch INTEGER NOT NULL DEFAULT 0)"""


class SqliteStateStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        path = Path(url.removeprefix("sqlite://"))  # sqlite:///abs/path → /abs/path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.execute(POSITIONS)
            columns = [r[1] for r in self._db.execute("PRAGMA table_info(magnetar_positions)")]
            if "epoch" not in columns:  # a store written before leader epochs
                self._db.execute(
                    "ALTER TABLE magnetar_positions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0"
                )
        except sqlite3.Error as e:
            raise StateStoreError(f"cannot open the SQLite state store {path}: {e}") from None
        self._tables: set[str] = set()

    def _ensure(self, dataset: str) -> str:
        table = f'"mv_{dataset}"'
        if dataset not in self._tables:
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._tables.add(dataset)
        return table

    def position(self, dataset: str) -> Position | None:
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, offsets, committed_ms, epoch FROM magnetar_positions "
                "WHERE dataset=?",
                (dataset,),
            ).fetchone()
        return _position(row)

    def commit(
        self,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str] = (),
        epoch: int = 0,
    ) -> bool:
        with self._lock:
            table = self._ensure(dataset)
            return self._in_transaction(
                f"commit of {dataset}",
                lambda: self._apply(table, dataset, batch_id, offsets, upserts, deletes, epoch),
            )

    def fence(self, dataset: str, epoch: int) -> Position | None:
        def raise_epoch() -> Position | None:
            row = self._db.execute(
                "SELECT batch_id, offsets, committed_ms, epoch FROM magnetar_positions "
                "WHERE dataset=?",
                (dataset,),
            ).fetchone()
            if row is not None and row[3] > epoch:
                raise ViewFencedError(f"{dataset} is led at epoch {row[3]} (not {epoch})")
            self._db.execute(
                "INSERT INTO magnetar_positions(dataset, batch_id, offsets, committed_ms, epoch) "
                "VALUES (?, -1, '{}', 0, ?) ON CONFLICT(dataset) DO UPDATE SET epoch=?",
                (dataset, epoch, epoch),
            )
            return _position(row)

        with self._lock:
            return self._in_transaction(f"fence of {dataset}", raise_epoch)

    def _in_transaction(self, what: str, work: Any) -> Any:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = work()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result
        except sqlite3.Error as e:
            raise StateStoreError(f"SQLite {what} failed: {e}") from None

    def _apply(
        self,
        table: str,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str],
        epoch: int,
    ) -> bool:
        row = self._db.execute(
            "SELECT batch_id, epoch FROM magnetar_positions WHERE dataset=?", (dataset,)
        ).fetchone()
        if row is not None and row[1] > epoch:
            raise ViewFencedError(f"{dataset} is led at epoch {row[1]} (not {epoch})")
        if row is not None and batch_id <= row[0]:
            return False
        self._db.executemany(
            f"INSERT INTO {table}(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            [(k, encode_row(v)) for k, v in upserts.items()],
        )
        self._db.executemany(f"DELETE FROM {table} WHERE key=?", [(k,) for k in deletes])
        self._db.execute(
            "INSERT INTO magnetar_positions(dataset, batch_id, offsets, committed_ms, epoch) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(dataset) DO UPDATE "
            "SET batch_id=excluded.batch_id, offsets=excluded.offsets, "
            "committed_ms=excluded.committed_ms, epoch=excluded.epoch",
            (
                dataset,
                batch_id,
                json.dumps(offsets, sort_keys=True),
                int(time.time() * 1000),
                epoch,
            ),
        )
        return True

    def get_many(self, dataset: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(keys)
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            table = self._ensure(dataset)
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for k, v in self._db.execute(
                    f"SELECT key, value FROM {table} WHERE key IN ({marks})", chunk
                ):
                    out[k] = json.loads(v)
        return out

    def scan(self, dataset: str, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            table = self._ensure(dataset)
            rows = self._db.execute(f"SELECT value FROM {table} ORDER BY key LIMIT ?", (limit,))
            return [json.loads(v) for (v,) in rows]

    def count(self, dataset: str) -> int:
        with self._lock:
            table = self._ensure(dataset)
            return int(self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def alias(self, view: str, dataset: str) -> None:
        with self._lock:
            table = self._ensure(dataset)
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(f'DROP VIEW IF EXISTS "mv_{view}"')
            self._db.execute(f'CREATE VIEW "mv_{view}" AS SELECT key, value FROM {table}')
            self._db.execute("COMMIT")

    def drop(self, dataset: str) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(f'DROP TABLE IF EXISTS "mv_{dataset}"')
            self._db.execute("DELETE FROM magnetar_positions WHERE dataset=?", (dataset,))
            self._db.execute("COMMIT")
            self._tables.discard(dataset)

    def drop_alias(self, view: str) -> None:
        with self._lock:
            self._db.execute(f'DROP VIEW IF EXISTS "mv_{view}"')

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _position(row: Any) -> Position | None:
    """A positions row (batch_id, offsets, committed_ms, epoch) as a Position; None when
    nothing was committed (no row, or only a fence)."""
    if row is None or row[0] < 0:
        return None
    return Position(row[0], json.loads(row[1]), row[2], row[3])
