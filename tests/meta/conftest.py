"""Fixtures that run the metadata contract against every backend."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from magnetar.meta.base import MetadataStore
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.meta.sqlite import SqliteMetadataStore
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.clock import ManualClock

BACKENDS = ["memory", "sqlite", "zookeeper"]

StoreFactory = Callable[[], MetadataStore]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=BACKENDS)
async def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[StoreFactory]:
    """Opens fresh, empty stores of one backend; closes the ones a test leaves open."""
    opened: list[MetadataStore] = []
    numbers = itertools.count()

    def make() -> MetadataStore:
        store: MetadataStore
        if request.param == "memory":
            store = MemoryMetadataStore(clock=clock)
        elif request.param == "zookeeper":
            zk = request.getfixturevalue("zookeeper")
            store = ZooKeeperMetadataStore(
                zk.url(f"/contract-{uuid.uuid4().hex[:12]}"), clock=clock
            )
        else:
            store = SqliteMetadataStore(tmp_path / f"meta-{next(numbers)}.db", clock=clock)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.aclose()


@pytest.fixture
def store(make_store: StoreFactory) -> MetadataStore:
    return make_store()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "meta.db"
