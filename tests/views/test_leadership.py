"""View leadership on a real ZooKeeper, in process: one leader per view, epochs that only
grow across leaders, a released view taken by the next broker, a lost session forgetting
every view; and a SQLite store written before epochs reading as epoch 0."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from magnetar.broker.records import LeaseKind, Leases, RecordKind, RecordStore
from magnetar.core.config import Settings
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.zookeeper import ZooKeeperProcess
from magnetar.views.leader import ViewLeaders
from magnetar.views.records import VersionRecord, ViewRecord
from magnetar.views.service import ViewService
from magnetar.views.stores import open_state_store


@dataclass(frozen=True)
class Me:  # what ViewLeaders reads of the broker's BrokerInfo
    id: str
    http: str
    https: str = ""


def test_one_leader_per_view_and_epochs_that_only_grow(zookeeper: ZooKeeperProcess) -> None:
    url = zookeeper.url(f"/leaders-{uuid.uuid4().hex[:8]}")

    async def run() -> None:
        stores = [ZooKeeperMetadataStore(url.partition("?")[0]) for _ in range(2)]
        a_me, b_me = Me("a:6650", "http://a:8080"), Me("b:6650", "http://b:8080")

        async def brokers() -> list[Me]:
            return [a_me, b_me]

        lost: list[str] = []
        a = ViewLeaders(Leases(stores[0], LeaseKind.VIEWS), a_me, brokers, lambda: lost.append("a"))
        b = ViewLeaders(Leases(stores[1], LeaseKind.VIEWS), b_me, brokers, lambda: lost.append("b"))
        try:
            assert await a.acquire("orders") == 1
            assert await b.acquire("orders") is None  # one leader at a time
            assert (await b.leader("orders")) == (await a.leader("orders"))
            leader = await b.leader("orders")
            assert leader is not None and (leader.broker, leader.epoch) == ("a:6650", 1)
            assert a.epoch("orders") == 1 and b.epoch("orders") is None
            await a.release("orders")
            assert a.epoch("orders") is None and await b.leader("orders") is None
            assert await b.acquire("orders") == 2  # a higher epoch than any before
            await stores[1].aclose()  # b's session ends: its leadership with it
            assert await a.leader("orders") is None
            assert await a.acquire("orders") == 3
            preferred = [await a.preferred(f"v{i}") for i in range(40)]
            assert 0 < sum(preferred) < 40  # views spread over both brokers
        finally:
            a.close()
            await stores[0].aclose()

    asyncio.run(run())


def test_a_slow_start_leaves_no_other_view_without_a_leader(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """A broker taking over views takes them all before any query has started: one start
    can take minutes (the broker's first Spark session, a long restore), and the next view
    must not wait that long for a leader. Injected: the first view's start never ends."""
    url = zookeeper.url(f"/slow-start-{uuid.uuid4().hex[:8]}")

    async def run() -> None:
        meta = ZooKeeperMetadataStore(url.partition("?")[0])
        definitions = RecordStore(meta, RecordKind.VIEWS)
        names = ["a_slow", "b_next"]
        for name in names:
            definition = {"source": "t", "sql": "SELECT key FROM events", "key": "key"}
            record = ViewRecord(name, VersionRecord(definition, 1, {}, 0))
            await definitions.put(name, json.dumps(record.to_json()).encode())
        service = ViewService(Settings(data_dir=tmp_path), definitions, None)
        me = Me("me:6650", "http://me:8080")

        async def brokers() -> list[Me]:
            return [me]

        service.leaders = ViewLeaders(Leases(meta, LeaseKind.VIEWS), me, brokers, service._lost)
        starting: list[str] = []

        async def resume(record: Any) -> list[Any]:
            runner = SimpleNamespace(name=record.name, dataset=record.name, stop=lambda: None)
            service.runners[record.name] = runner
            return [service.runners[record.name]]

        async def launch(runner: Any) -> None:
            starting.append(runner.name)
            if runner.name == "a_slow":
                await asyncio.Event().wait()

        service._resume = resume  # type: ignore[method-assign]
        service._launch = launch  # type: ignore[method-assign]
        leading = asyncio.create_task(service._lead())
        try:
            async with asyncio.timeout(20):
                while any(service.leaders.epoch(n) is None for n in names):
                    await asyncio.sleep(0.05)
                while starting != names:
                    await asyncio.sleep(0.05)
        finally:
            leading.cancel()
            await service.aclose()
            await meta.aclose()

    asyncio.run(run())


def test_a_sqlite_store_from_before_epochs_reads_as_epoch_zero(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE magnetar_positions (dataset TEXT PRIMARY KEY, batch_id INTEGER NOT NULL, "
        "offsets TEXT NOT NULL, committed_ms INTEGER NOT NULL)"
    )
    offsets = {"persistent://public/default/t": {"0": 7}}
    db.execute("INSERT INTO magnetar_positions VALUES ('ds', 4, ?, 1)", (json.dumps(offsets),))
    db.commit()
    db.close()
    store = open_state_store(f"sqlite://{path}")
    try:
        position = store.position("ds")
        assert position is not None and (position.batch_id, position.epoch) == (4, 0)
        assert position.offsets == offsets
        assert store.fence("ds", 1) == position
        assert store.commit("ds", 5, offsets, {"k": {"n": 1}}, epoch=1)
    finally:
        store.close()
