"""A real cluster per test: storage-node processes and a broker process on free loopback
ports, sharing the test run's ZooKeeper under a chroot of their own."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from magnetar.broker.ownership import BrokerInfo
from magnetar.meta.zookeeper import ZooKeeperMetadataStore
from magnetar.testing.cluster import StorageNodeProcess, broker
from magnetar.testing.server import StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess


@dataclass
class Cluster:
    root: Path
    url: str
    nodes: list[StorageNodeProcess] = field(default_factory=list)
    brokers: list[StandaloneProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        MADE.append(self)  # its servers' last lines go into the report if the test fails

    def add_node(self, *extra: str) -> StorageNodeProcess:
        i = len(self.nodes)
        node = StorageNodeProcess(self.root / f"node{i}", list(extra), metadata_url=self.url)
        self.nodes.append(node.start())
        return node

    def restart_node(self, node: StorageNodeProcess) -> StorageNodeProcess:
        """The same node (data directory, port) started again after a kill."""
        again = StorageNodeProcess(
            node.data_dir, node.extra_args, metadata_url=self.url, storage_port=node.storage_port
        )
        self.nodes[self.nodes.index(node)] = again.start()
        return again

    def add_broker(self, *quorum_args: str) -> StandaloneProcess:
        b = broker(self.root / f"broker{len(self.brokers)}", self.url, *quorum_args)
        self.brokers.append(b.start())
        return b

    def meta(self, path: str) -> Any:
        """A metadata node's JSON value, read by a session of the test's own."""

        async def read() -> Any:
            store = ZooKeeperMetadataStore(self.url.partition("?")[0])
            try:
                node = await store.get(path)
                return json.loads(node.value) if node and node.value else None
            finally:
                await store.aclose()

        return asyncio.run(read())

    def ledgers(self, topic: str) -> list[dict[str, Any]]:
        """The segment list of a non-partitioned topic: ensembles, state, last entry."""
        path = topic.removeprefix("persistent://")  # the partition's key: tenant/ns/topic
        value = self.meta(f"/managed-ledgers/{quote(path, safe='')}")
        return list(value["ledgers"]) if value else []

    def stop(self) -> None:
        for p in [*self.brokers, *self.nodes]:
            if p.proc is not None and p.proc.poll() is None:
                p.resume()
            p.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def cluster(zookeeper: ZooKeeperProcess, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zookeeper.url(f"/cluster-{uuid.uuid4().hex[:10]}"))
    try:
        yield c
    finally:
        c.stop()


MADE: list[Cluster] = []  # the clusters of the running test, fixture's or its own


@pytest.fixture(autouse=True)
def _servers_said_when_failed(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a failed test, the last lines of every server of every cluster it made (a
    test that builds its own cluster too): what the servers saw, in the report."""
    yield
    try:
        if request.node.stash.get(_FAILED, False):
            for c in MADE:
                _print_last_lines(c)
    finally:
        MADE.clear()


RUNNING: list[Any] = []  # the clients of a test still sending: stopped after it, pass or fail


@pytest.fixture(autouse=True)
def _senders_stopped() -> Iterator[None]:
    """A test that fails leaves its publishers' threads sending; a client library still
    running at interpreter exit aborts the whole test run (``terminate called without an
    active exception``). Every publisher registered in RUNNING is abandoned after its test."""
    yield
    while RUNNING:
        RUNNING.pop().abandon()


def _print_last_lines(c: Cluster, most: int = 60) -> None:
    """The last lines each process printed (its warnings and errors: info is not logged),
    so that a failed cluster test's report shows what the servers saw."""
    for i, p in enumerate([*c.brokers, *c.nodes]):
        name = f"broker{i}" if i < len(c.brokers) else f"node{i - len(c.brokers)}"
        print(f"--- {name}: {len(p.output)} lines, the last {most}:")
        print("".join(p.output[-most:]), end="")


def broker_info(name: str) -> BrokerInfo:
    """A broker's registration for an in-process ``Ownership`` (nothing listens there)."""
    host = f"127.0.0.{len(name)}"
    return BrokerInfo(
        f"{name}:6650", f"pulsar://{name}:6650", f"http://{name}:8080", f"{host}:9092", 0, {}
    )


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
