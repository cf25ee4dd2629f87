from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.config import Settings, build_settings
from magnetar.meta import open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings

OpenEngine = Callable[..., Awaitable[StorageEngine]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return build_settings(env={}, overrides={"data_dir": tmp_path / "data"})


@pytest.fixture
async def open_engine(tmp_path: Path) -> AsyncIterator[OpenEngine]:
    """Opens engines on ``tmp_path/data`` (settings overridable); closes them at the end."""
    opened: list[Any] = []

    async def _open(**overrides: Any) -> StorageEngine:
        s = build_settings(env={}, overrides={"data_dir": tmp_path / "data", **overrides})
        meta = open_metadata_store(s.metadata)
        engine = await StorageEngine.open(StorageSettings.of(s), meta)
        opened.append((engine, meta))
        return engine

    yield _open
    for engine, meta in reversed(opened):
        await engine.aclose()
        await meta.aclose()


async def reopen(engine: StorageEngine, open_engine: OpenEngine, **overrides: Any) -> StorageEngine:
    """Close ``engine`` cleanly and open a new one on the same data."""
    await engine.aclose()
    await engine.meta.aclose()
    return await open_engine(**overrides)
