"""The writer's contract tests run on every SegmentStorage (STYLE 6): in memory, and local
(:class:`LocalSegments` over a :class:`LedgerStore` on a real engine in ``tmp_path``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import pytest

from magnetar.core.config import build_settings
from magnetar.core.entries import Entry
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import SegmentStorage
from magnetar.meta import open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings
from magnetar.storage.errors import StorageError
from magnetar.storage.ledger_store import LedgerStore
from magnetar.testing.held_segments import HeldSegments
from magnetar.testing.memory_segments import MemorySegments

BACKENDS = ["memory", "local"]


class Segments(Protocol):
    """A SegmentStorage under test, its faults (hold, fail) and what it stored."""

    storage: SegmentStorage
    hold: bool

    @property
    def held(self) -> int: ...

    def release_appends(self) -> int: ...

    def fail_next(self, segment: int, error: StorageError) -> None: ...

    def fail_held(self, error: StorageError) -> int: ...

    async def stored(self, segment: int) -> dict[int, Entry]:
        """Every entry the storage holds of ``segment``, by entry id."""
        ...

    def sealed(self, segment: int) -> int | None: ...

    def fenced(self, segment: int) -> bool: ...


class _Faults:
    """The hold and fail faults of ``faults`` (MemorySegments or HeldSegments: the same)."""

    faults: MemorySegments | HeldSegments

    @property
    def hold(self) -> bool:
        return self.faults.hold

    @hold.setter
    def hold(self, value: bool) -> None:
        self.faults.hold = value

    @property
    def held(self) -> int:
        return self.faults.held

    def release_appends(self) -> int:
        return self.faults.release_appends()

    def fail_next(self, segment: int, error: StorageError) -> None:
        self.faults.fail_next(segment, error)

    def fail_held(self, error: StorageError) -> int:
        return self.faults.fail_held(error)


class InMemory(_Faults):
    def __init__(self) -> None:
        self.memory = MemorySegments()
        self.storage = self.faults = self.memory

    async def stored(self, segment: int) -> dict[int, Entry]:
        return dict(self.memory.segments[segment].entries)

    def sealed(self, segment: int) -> int | None:
        return self.memory.segments[segment].sealed

    def fenced(self, segment: int) -> bool:
        return self.memory.segments[segment].fenced


class Local(_Faults):
    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self.local = LocalSegments(store)
        self.storage = self.faults = HeldSegments(self.local)

    async def stored(self, segment: int) -> dict[int, Entry]:
        ledger = self.store.ledger(segment)
        if ledger is None:
            return {}
        records = await self.store.read_records(segment, list(ledger.ids))
        return {r.entry_id: r.entry(segment) for r in records}

    def sealed(self, segment: int) -> int | None:
        return self.local.sealed(segment)

    def fenced(self, segment: int) -> bool:
        return self.store.is_fenced(segment)


@pytest.fixture(params=BACKENDS)
async def segments(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Segments]:
    if request.param == "memory":
        yield InMemory()
        return
    settings = build_settings(env={}, overrides={"data_dir": tmp_path / "data"})
    catalog = open_metadata_store(settings.metadata)
    engine = await StorageEngine.open(StorageSettings.of(settings), catalog)
    try:
        yield Local(await LedgerStore.open(engine, settings.data_dir / "fenced.json"))
    finally:
        await engine.aclose()
        await catalog.aclose()
