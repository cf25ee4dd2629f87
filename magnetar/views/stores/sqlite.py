"""The default state store: one SQLite file under the data dir (WAL, synchronous=FULL).

Shape (read it with ``sqlite3 DATA_DIR/views/state.db``)::

    mv_<dataset>(key TEXT PRIMARY KEY, value TEXT)       -- value: the row as JSON
    mv_<view>                                             -- a VIEW on the current dataset
    magnetar_positions(dataset TEXT PRIMARY KEY, batch_id INTEGER, offsets TEXT,
                       committed_ms INTEGER)
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from magnetar.views.errors import StateStoreError
from magnetar.views.model import Offsets, Position, encode_row
from magnetar.views.stores.base import StateStore

POSITIONS = """CREATE TABLE IF NOT EXISTS magnetar_positions (
    dataset TEXT PRIMARY KEY, batch_id INTEGER NOT NULL, offsets TEXT NOT NULL,
    committed_ms INTEGER NOT NULL)"""


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
                "SELECT batch_id, offsets, committed_ms FROM magnetar_positions WHERE dataset=?",
                (dataset,),
            ).fetchone()
        return Position(row[0], json.loads(row[1]), row[2]) if row else None

    def commit(
        self,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str] = (),
    ) -> bool:
        with self._lock:
            table = self._ensure(dataset)
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    applied = self._apply(table, dataset, batch_id, offsets, upserts, deletes)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return applied
            except sqlite3.Error as e:
                raise StateStoreError(f"SQLite commit of {dataset} failed: {e}") from None

    def _apply(
        self,
        table: str,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str],
    ) -> bool:
        row = self._db.execute(
            "SELECT batch_id FROM magnetar_positions WHERE dataset=?", (dataset,)
        ).fetchone()
        if row is not None and batch_id <= row[0]:
            return False
        self._db.executemany(
            f"INSERT INTO {table}(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            [(k, encode_row(v)) for k, v in upserts.items()],
        )
        self._db.executemany(f"DELETE FROM {table} WHERE key=?", [(k,) for k in deletes])
        self._db.execute(
            "INSERT INTO magnetar_positions VALUES (?, ?, ?, ?) ON CONFLICT(dataset) DO UPDATE "
            "SET batch_id=excluded.batch_id, offsets=excluded.offsets, "
            "committed_ms=excluded.committed_ms",
            (dataset, batch_id, json.dumps(offsets, sort_keys=True), int(time.time() * 1000)),
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
