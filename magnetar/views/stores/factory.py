"""``open_state_store(url)``: sqlite (default, under the data dir), postgresql://, redis://."""

from __future__ import annotations

from pathlib import Path

from magnetar.views.errors import InvalidViewError
from magnetar.views.stores.base import StateStore


def resolve_store_url(url: str, data_dir: Path) -> str:
    """``sqlite`` → ``sqlite:///DATA_DIR/views/state.db``; other URLs unchanged."""
    if url in ("", "sqlite"):
        return f"sqlite:///{(data_dir / 'views' / 'state.db').resolve()}"
    return url


def open_state_store(url: str) -> StateStore:
    """Connect to the store at ``url``; InvalidViewError for an unknown scheme or a missing
    driver, StateStoreError when the server cannot be reached."""
    if url.startswith("sqlite:///"):
        from magnetar.views.stores.sqlite import SqliteStateStore

        return SqliteStateStore(url)
    if url.startswith(("postgresql://", "postgres://")):
        from magnetar.views.stores.postgres import PostgresStateStore

        return PostgresStateStore(url)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from magnetar.views.stores.redis import RedisStateStore

        return RedisStateStore(url)
    raise InvalidViewError(
        f"unknown state store {url!r}: use sqlite, sqlite:///PATH, postgresql://... or redis://..."
    )
