"""What a cluster needs of ZooKeeper beyond the MetadataStore contract (which the contract
suite runs on it): watches that see other processes' changes, ephemeral nodes tied to a
session, sequential ids, the session's state, and a ZooKeeper restart under load.

Every test runs a real ZooKeeper (Debian's package): the shared one of the test run, or a
private one when the test stops, freezes or restarts it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kazoo.client import KazooState

from magnetar.meta import (
    BadVersionError,
    MetadataError,
    NodeExistsError,
    NotFoundError,
    Notification,
    SessionState,
)
from magnetar.meta.zookeeper import ZooKeeperMetadataStore, store_name, zk_name
from magnetar.testing.server import REPO, StandaloneProcess
from magnetar.testing.zookeeper import ZooKeeperProcess

TIMEOUT_S = 20.0

OpenStore = Callable[..., ZooKeeperMetadataStore]


@pytest.fixture
async def open_store(zookeeper: ZooKeeperProcess) -> AsyncIterator[OpenStore]:
    """Handles on one fresh chroot of the shared ZooKeeper (each its own session)."""
    chroot = f"/zk-{uuid.uuid4().hex[:12]}"
    opened: list[ZooKeeperMetadataStore] = []

    def _open(server: ZooKeeperProcess | None = None, **kwargs: object) -> ZooKeeperMetadataStore:
        store = ZooKeeperMetadataStore((server or zookeeper).url(chroot), **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await store.aclose()


async def _until(probe: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not probe():
            await asyncio.sleep(0.02)


def test_every_character_survives_the_path_escape() -> None:
    for name in ["plain", "%", "a%{20}b", "🙂", "\x01", ".", "..", "...", "\u0085", "\uffff"]:
        assert store_name(zk_name(name)) == name
    assert "/" not in zk_name("🙂") and zk_name("..") != ".."


async def test_a_watch_sees_changes_made_by_another_session(open_store: OpenStore) -> None:
    mine, theirs = open_store(), open_store()
    seen: list[Notification] = []
    mine.watch("/policies", seen.append)
    await asyncio.sleep(0.2)  # the remote cache has loaded the (empty) subtree
    await theirs.put("/policies/a", b"1")
    await theirs.put("/policies/a", b"2")
    await theirs.delete("/policies/a")
    await _until(lambda: Notification("/policies/a", "deleted") in seen, "the deletion")
    kinds = [n.kind for n in seen if n.path == "/policies/a"]
    # At least once each, in order; quick successive changes may coalesce.
    assert kinds[0] == "created" and kinds[-1] == "deleted"
    assert set(kinds) <= {"created", "modified", "deleted"}


async def test_own_changes_are_heard_once_not_echoed(open_store: OpenStore) -> None:
    store = open_store()
    seen: list[Notification] = []
    store.watch("/", seen.append)
    await asyncio.sleep(0.2)
    await store.put("/x", b"1")
    await store.put("/x", b"2")
    await store.delete("/x")
    other = open_store()
    await other.put("/marker", b"")  # once this echo arrives, any echo of ours would have
    await _until(lambda: Notification("/marker", "created") in seen, "the marker")
    assert [n for n in seen if n.path == "/x"] == [
        Notification("/x", "created"),
        Notification("/x", "modified"),
        Notification("/x", "deleted"),
    ]


async def test_an_ephemeral_node_goes_with_its_session(open_store: OpenStore) -> None:
    owner, other = open_store(), open_store()
    seen: list[Notification] = []
    other.watch("/owners", seen.append)
    await owner.create_ephemeral("/owners/bundle-1", b"broker-a")
    with pytest.raises(NodeExistsError):
        await other.create_ephemeral("/owners/bundle-1", b"broker-b")
    node = await other.get("/owners/bundle-1")
    assert node is not None and node.value == b"broker-a"
    await owner.aclose()
    await _until(lambda: Notification("/owners/bundle-1", "deleted") in seen, "the deletion")
    assert await other.get("/owners/bundle-1") is None
    assert await other.list_children("/owners") == []
    await other.create_ephemeral("/owners/bundle-1", b"broker-b")  # free to take over


@pytest.mark.slow
async def test_an_ephemeral_node_of_a_killed_process_expires(
    open_store: OpenStore, zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    other = open_store()
    chroot = other.url.removeprefix(zookeeper.url())
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, zookeeper.url(chroot)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "owned"
        assert await other.get("/owners/node-1") is not None
        child.send_signal(signal.SIGKILL)  # no goodbye: only the session timeout ends it
        child.wait()
        async with asyncio.timeout(TIMEOUT_S):
            while await other.get("/owners/node-1") is not None:
                await asyncio.sleep(0.1)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


_CHILD = """
import asyncio, sys
from magnetar.meta.zookeeper import ZooKeeperMetadataStore

async def main():
    store = ZooKeeperMetadataStore(sys.argv[1], session_timeout=2.0)
    await store.create_ephemeral("/owners/node-1", b"me")
    print("owned", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_sequential_nodes_number_upwards(open_store: OpenStore) -> None:
    a, b = open_store(), open_store()
    paths = [await (a if i % 2 else b).create_sequential("/ids/id-", b"") for i in range(6)]
    numbers = [int(p.removeprefix("/ids/id-")) for p in paths]
    assert numbers == sorted(numbers) and len(set(numbers)) == 6
    assert await a.list_children("/ids") == [p.removeprefix("/ids/") for p in paths]


@pytest.mark.slow
async def test_a_session_cut_off_past_its_timeout_is_lost_before_anyone_takes_over(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Freeze ZooKeeper: the owner hears SUSPENDED, then LOST on its own clock once the
    session timeout has passed — it must stop acting as owner by then. On thaw, the
    server expires the session; the store reconnects with a new one."""
    with ZooKeeperProcess(tmp_path / "zk") as private:
        owner = open_store(private, session_timeout=2.0)
        states: list[SessionState] = []
        owner.on_session(states.append)
        await owner.create_ephemeral("/owners/x", b"")
        old_session = owner._zk.client_id[0]
        assert private.proc is not None
        os.kill(private.proc.pid, signal.SIGSTOP)
        try:
            await _until(lambda: SessionState.LOST in states, "LOST")
        finally:
            os.kill(private.proc.pid, signal.SIGCONT)
        assert states[:2] == [SessionState.SUSPENDED, SessionState.LOST]
        await _until(lambda: states[-1] is SessionState.CONNECTED, "reconnected")
        await owner.put("/after", b"works")
        # A new session: the old one is never revived, even if the server had not expired
        # it yet when the store reconnected; the server expires it, and its node goes.
        assert owner._zk.client_id[0] != old_session
        async with asyncio.timeout(TIMEOUT_S):  # the old session's node goes
            while await owner.get("/owners/x") is not None:
                await asyncio.sleep(0.1)


async def test_a_session_revived_after_it_was_given_up_is_closed_not_used(
    open_store: OpenStore,
) -> None:
    """The race the test above can lose under load: the store gives its session up on its
    own clock, but a connect request carrying the old id was already in flight, and the
    server, not having expired it yet, revives it — ephemeral nodes and all. The store
    must close that session (its nodes go) and go on with a new one. Injected: kazoo's
    SUSPENDED, our timer's expiry, then a reconnection with the old id."""
    owner = open_store(session_timeout=2.0)
    states: list[SessionState] = []
    owner.on_session(states.append)
    node = f"/owners/{uuid.uuid4().hex}"
    await owner.create_ephemeral(node, b"")
    zk, watch = owner._zk, owner._session
    old_id, old_password = zk.client_id
    zk._live.clear()  # as kazoo does on SUSPENDED: its client_id is None from here on
    watch.on_state(KazooState.SUSPENDED)
    watch._cancel_timer()
    watch._expired()  # given up: the session id is reset in kazoo
    zk._session_id, zk._session_passwd = old_id, old_password  # the connect in flight
    zk._live.set()  # kazoo's order: live, then CONNECTED to its listeners
    watch.on_state(KazooState.CONNECTED)  # kazoo, back on the revived session
    await _until(lambda: states[-1:] == [SessionState.CONNECTED], "a new session")
    assert states == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
    assert zk.client_id[0] != old_id
    assert await owner.get(node) is None  # closed with the old session
    await owner.put("/after-revival", b"works")


@pytest.mark.slow
async def test_zookeeper_restarted_under_load_loses_nothing_acknowledged(
    open_store: OpenStore, tmp_path: Path
) -> None:
    with ZooKeeperProcess(tmp_path / "zk") as private:
        store = open_store(private, session_timeout=10.0)
        acknowledged: list[int] = []
        failed = 0

        async def writer() -> None:
            nonlocal failed
            for i in range(400):
                try:
                    await store.put(f"/load/{i:04d}", str(i).encode())
                    acknowledged.append(i)
                except MetadataError:
                    failed += 1  # a clear, retriable error while ZooKeeper is away
                    await asyncio.sleep(0.05)

        task = asyncio.create_task(writer())
        await _until(lambda: len(acknowledged) >= 50, "writes before the restart")
        private.stop()
        await asyncio.sleep(0.5)
        private.start()  # same port, same data directory
        await task
        assert len(acknowledged) + failed == 400
        assert acknowledged[-1] == 399, "writes go on after the restart"
        children = await store.list_children("/load")
        assert set(acknowledged) <= {int(c) for c in children}
        for i in acknowledged:
            node = await store.get(f"/load/{i:04d}")
            assert node is not None and node.value == str(i).encode()


@pytest.mark.slow
def test_a_standalone_keeps_its_metadata_in_zookeeper(
    zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """`--metadata-url zk://...`: topics, cursors and segment lists live in ZooKeeper and
    survive a restart of the server."""
    import pulsar

    url = zookeeper.url(f"/standalone-{uuid.uuid4().hex[:8]}")
    topic = "persistent://public/default/zk-backed"
    args = ["--metadata-url", url]
    with StandaloneProcess(tmp_path / "data", extra_args=args) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(100):
            producer.send(str(i).encode())
        consumer = client.subscribe(
            topic, "durable", initial_position=pulsar.InitialPosition.Earliest
        )
        for _ in range(40):
            consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
        client.close()
    with StandaloneProcess(tmp_path / "data", extra_args=args) as server:
        client = pulsar.Client(
            server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        consumer = client.subscribe(topic, "durable")
        rest = [int(consumer.receive(10_000).data()) for _ in range(60)]
        client.close()
    assert rest == list(range(40, 100))


async def test_a_handle_that_remembers_an_old_version_is_judged_by_the_real_one(
    open_store: OpenStore,
) -> None:
    """Each handle plans a write to a node it wrote before from memory (one round trip);
    another handle's write in between must neither be overwritten nor make a correct
    compare-and-set fail."""
    a, b = open_store(), open_store()
    await a.put("/cursor", b"a0")  # a remembers version 0
    await b.put("/cursor", b"b1", expected_version=0)  # now version 1, unknown to a
    with pytest.raises(BadVersionError):
        await a.put("/cursor", b"a-stale", expected_version=0)
    stat = await a.put("/cursor", b"a2", expected_version=1)
    assert stat.version == 2
    node = await b.get("/cursor")
    assert node is not None and node.value == b"a2"
    await b.delete("/cursor")
    with pytest.raises(NotFoundError):
        await a.put("/cursor", b"gone", expected_version=2)
    await a.put("/cursor", b"new", expected_version=-1)  # recreated: version 0 again
    assert (await b.get("/cursor")).stat.version == 0  # type: ignore[union-attr]
