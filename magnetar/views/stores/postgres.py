"""PostgreSQL state store (psycopg 3). Read a view with psql::

    SELECT key, value->>'total' FROM mv_orders WHERE key = 'alice';

Shape::

    mv_<dataset>(key TEXT PRIMARY KEY, value JSONB)      -- one table per view version
    mv_<view>                                             -- a VIEW on the current dataset
    magnetar_positions(dataset TEXT PRIMARY KEY, batch_id BIGINT, offsets JSONB,
                       committed_ms BIGINT, epoch BIGINT)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from magnetar.views.errors import InvalidViewError, StateStoreError, ViewFencedError
from magnetar.views.model import Offsets, Position, encode_row
from magnetar.views.stores.base import StateStore

POSITIONS = """CREATE TABLE IF NOT EXISTS magnetar_positions (
    dataset TEXT PRIMARY KEY, batch_id BIGINT NOT NULL, offsets JSONB NOT NULL,
    committed_ms BIGINT NOT NULL, epoch BIGINT NOT NULL DEFAULT 0)"""
IDLE_IN_TRANSACTION_MS = 10_000
EPOCHS = "ALTER TABLE magnetar_positions ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0"


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise InvalidViewError(
            "the PostgreSQL state store needs psycopg: pip install 'psycopg[binary]>=3.2'"
        ) from None
    return psycopg


class PostgresStateStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        self._psycopg = _driver()
        self._lock = threading.Lock()
        self._tables: set[str] = set()
        self._closed = False
        try:
            self._db = self._connect()
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(7310)")  # racing first opens
                self._db.execute(POSITIONS)
                self._db.execute(EPOCHS)  # a store written before leader epochs
        except self._psycopg.Error as e:
            raise StateStoreError(f"cannot open the PostgreSQL state store: {e}") from None

    def _connect(self) -> Any:
        """A connection whose transactions cannot outlive a frozen process: PostgreSQL ends
        a session idle inside a transaction for IDLE_IN_TRANSACTION (a broker stopped
        mid-commit would otherwise hold its rows locked, and the next leader's fence would
        wait for it forever)."""
        options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=10, options=options)

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        with self._lock:
            try:
                if not self._closed and (self._db.closed or self._db.broken):  # ended by the server
                    self._db = self._connect()
                with self._db.transaction():
                    yield self._db
            except self._psycopg.Error as e:
                raise StateStoreError(f"PostgreSQL {what} failed: {e}") from None

    def _ensure(self, db: Any, dataset: str) -> str:
        table = f'"mv_{dataset}"'
        if dataset not in self._tables:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value JSONB NOT NULL)"
            )
            self._tables.add(dataset)
        return table

    def position(self, dataset: str) -> Position | None:
        with self._tx("read") as db:
            row = db.execute(
                "SELECT batch_id, offsets, committed_ms, epoch FROM magnetar_positions "
                "WHERE dataset=%s",
                (dataset,),
            ).fetchone()
        return _position(row)

    def fence(self, dataset: str, epoch: int) -> Position | None:
        with self._tx(f"fence of {dataset}") as db:
            row = self._locked(db, dataset)
            if row[3] > epoch:
                raise ViewFencedError(f"{dataset} is led at epoch {row[3]} (not {epoch})")
            db.execute("UPDATE magnetar_positions SET epoch=%s WHERE dataset=%s", (epoch, dataset))
        return _position(row)

    def _locked(self, db: Any, dataset: str) -> Any:
        """The dataset's positions row, created empty if missing, locked until the end of
        the transaction."""
        db.execute(
            "INSERT INTO magnetar_positions VALUES (%s, -1, '{}', 0, 0) ON CONFLICT DO NOTHING",
            (dataset,),
        )
        return db.execute(
            "SELECT batch_id, offsets, committed_ms, epoch FROM magnetar_positions "
            "WHERE dataset=%s FOR UPDATE",
            (dataset,),
        ).fetchone()

    def commit(
        self,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str] = (),
        epoch: int = 0,
    ) -> bool:
        with self._tx(f"commit of {dataset}") as db:
            table = self._ensure(db, dataset)
            stored, _, _, stored_epoch = self._locked(db, dataset)
            if stored_epoch > epoch:
                raise ViewFencedError(f"{dataset} is led at epoch {stored_epoch} (not {epoch})")
            if batch_id <= stored:
                return False
            with db.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table}(key, value) VALUES (%s, %s) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    [(k, encode_row(v)) for k, v in upserts.items()],
                )
                cur.executemany(f"DELETE FROM {table} WHERE key=%s", [(k,) for k in deletes])
            db.execute(
                "UPDATE magnetar_positions SET batch_id=%s, offsets=%s, committed_ms=%s, "
                "epoch=%s WHERE dataset=%s",
                (batch_id, json.dumps(offsets), int(time.time() * 1000), epoch, dataset),
            )
            return True

    def get_many(self, dataset: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        with self._tx("read") as db:
            table = self._ensure(db, dataset)
            rows = db.execute(
                f"SELECT key, value FROM {table} WHERE key = ANY(%s)", (list(keys),)
            ).fetchall()
        return {k: v for k, v in rows}

    def scan(self, dataset: str, limit: int) -> list[dict[str, Any]]:
        with self._tx("read") as db:
            table = self._ensure(db, dataset)
            rows = db.execute(f"SELECT value FROM {table} ORDER BY key LIMIT %s", (limit,))
            return [v for (v,) in rows.fetchall()]

    def count(self, dataset: str) -> int:
        with self._tx("read") as db:
            table = self._ensure(db, dataset)
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def alias(self, view: str, dataset: str) -> None:
        with self._tx("alias") as db:
            table = self._ensure(db, dataset)
            db.execute(f'DROP VIEW IF EXISTS "mv_{view}"')
            db.execute(f'CREATE VIEW "mv_{view}" AS SELECT key, value FROM {table}')

    def drop(self, dataset: str) -> None:
        with self._tx("drop") as db:
            db.execute(f'DROP TABLE IF EXISTS "mv_{dataset}" CASCADE')
            db.execute("DELETE FROM magnetar_positions WHERE dataset=%s", (dataset,))
        self._tables.discard(dataset)

    def drop_alias(self, view: str) -> None:
        with self._tx("drop") as db:
            db.execute(f'DROP VIEW IF EXISTS "mv_{view}"')

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()


def _position(row: Any) -> Position | None:
    """A positions row (batch_id, offsets, committed_ms, epoch); None when nothing was
    committed (no row, or only a fence)."""
    if row is None or row[0] < 0:
        return None
    return Position(row[0], row[1], row[2], row[3])
