"""The MetadataStore contract, run against every backend (see magnetar/meta/base.py).

A new backend joins by adding itself to ``BACKENDS`` in conftest.py; the SQLite-only tests
at the end cover what only a file can do (reopen, share, refuse a foreign file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.core.errors import ClosedError, ConfigError
from magnetar.meta import open_metadata_store
from magnetar.meta.base import MetadataStore, Notification, Op
from magnetar.meta.errors import BadVersionError, MetadataError, NodeExistsError, NotFoundError
from magnetar.meta.factory import open_store
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.meta.sqlite import SqliteMetadataStore

if TYPE_CHECKING:
    from magnetar.testing.clock import ManualClock

    from .conftest import StoreFactory

# --- get and put ---------------------------------------------------------------------------


async def test_get_of_a_missing_node_is_none(store: MetadataStore) -> None:
    assert await store.get("/missing") is None
    assert not await store.exists("/missing")
    assert await store.get("/") is None  # the root is a valid path that never holds a value


async def test_put_creates_at_version_0_and_each_overwrite_adds_one(
    store: MetadataStore, clock: ManualClock
) -> None:
    created = clock.now
    stat = await store.put("/a", b"one")
    assert (stat.version, stat.created_ms, stat.modified_ms) == (0, created, created)

    clock.advance(5)
    stat = await store.put("/a", b"two")
    assert (stat.version, stat.created_ms, stat.modified_ms) == (1, created, created + 5)

    node = await store.get("/a")
    assert node is not None
    assert node.value == b"two"
    assert node.stat == stat
    assert await store.exists("/a")


async def test_empty_value_is_a_value(store: MetadataStore) -> None:
    await store.put("/empty", b"")
    node = await store.get("/empty")
    assert node is not None
    assert node.value == b""


async def test_create_only_put_refuses_an_existing_node(store: MetadataStore) -> None:
    assert (await store.put("/a", b"first", expected_version=-1)).version == 0
    with pytest.raises(NodeExistsError, match="/a"):
        await store.put("/a", b"second", expected_version=-1)
    node = await store.get("/a")
    assert node is not None
    assert (node.value, node.stat.version) == (b"first", 0)


async def test_put_with_a_wrong_version_changes_nothing(store: MetadataStore) -> None:
    await store.put("/a", b"v0")
    before = await store.get("/a")
    with pytest.raises(BadVersionError, match="/a") as caught:
        await store.put("/a", b"lost", expected_version=1)
    assert caught.value.retriable
    assert await store.get("/a") == before

    assert (await store.put("/a", b"v1", expected_version=0)).version == 1


async def test_versioned_put_on_a_missing_node_is_not_found(store: MetadataStore) -> None:
    with pytest.raises(NotFoundError, match="/missing"):
        await store.put("/missing", b"x", expected_version=0)
    assert await store.get("/missing") is None


# --- delete --------------------------------------------------------------------------------


async def test_delete_unconditionally_and_by_version(store: MetadataStore) -> None:
    await store.put("/a", b"x")
    await store.delete("/a")
    assert await store.get("/a") is None

    await store.put("/b", b"x")
    await store.put("/b", b"y")
    with pytest.raises(BadVersionError):
        await store.delete("/b", expected_version=0)
    assert await store.exists("/b")
    await store.delete("/b", expected_version=1)
    assert await store.get("/b") is None


async def test_delete_of_a_missing_node_is_not_found(store: MetadataStore) -> None:
    with pytest.raises(NotFoundError, match="/missing"):
        await store.delete("/missing")
    with pytest.raises(NotFoundError, match="/missing"):
        await store.delete("/missing", expected_version=0)


async def test_a_recreated_node_starts_again_at_version_0(store: MetadataStore) -> None:
    await store.put("/a", b"x")
    await store.put("/a", b"y")
    await store.delete("/a")
    assert (await store.put("/a", b"z", expected_version=-1)).version == 0


async def test_delete_leaves_the_children(store: MetadataStore) -> None:
    await store.put("/a", b"parent")
    await store.put("/a/b", b"child")
    await store.delete("/a")
    assert await store.get("/a") is None
    assert await store.exists("/a/b")
    assert await store.list_children("/a") == ["b"]


async def test_delete_recursive_removes_the_subtree_only(store: MetadataStore) -> None:
    for path in ["/t", "/t/a", "/t/a/b", "/t/c/d", "/tx", "/u/t"]:
        await store.put(path, b"x")
    await store.delete_recursive("/t")
    for path in ["/t", "/t/a", "/t/a/b", "/t/c/d"]:
        assert await store.get(path) is None
    assert await store.exists("/tx")
    assert await store.exists("/u/t")

    await store.delete_recursive("/missing")  # missing nodes are ignored
    await store.delete_recursive("/")
    assert await store.list_children("/") == []


# --- list_children -------------------------------------------------------------------------


async def test_list_children_has_implicit_parents_sorted_without_grandchildren(
    store: MetadataStore,
) -> None:
    for path in ["/a/b/c", "/a/d", "/a/b2", "/a", "/c"]:
        await store.put(path, b"x")
    assert await store.list_children("/") == ["a", "c"]
    assert await store.list_children("/a") == ["b", "b2", "d"]
    assert await store.list_children("/a/b") == ["c"]  # /a/b has no value of its own
    assert await store.list_children("/a/b/c") == []
    assert await store.list_children("/missing") == []


@pytest.mark.parametrize(
    "neighbour",
    [
        "/ab/x",  # shares the prefix "/a" but is not under "/a/"
        "/a-b/x",  # "-" and "." sort before "/"
        "/a.b/x",
        "/a0/x",  # "0" follows "/": the end of the range of paths under "/a/"
        "/a%/x",  # LIKE wildcards
        "/a_/x",
    ],
)
async def test_list_children_does_not_list_a_neighbour_sharing_the_prefix(
    store: MetadataStore, neighbour: str
) -> None:
    await store.put("/a/b", b"x")
    await store.put(neighbour, b"x")
    assert await store.list_children("/a") == ["b"]


async def test_list_children_sorts_by_code_point(store: MetadataStore) -> None:
    names = ["b", "b-c", "b.c", "a/x", "Z", "é", "z", "🙂", "日本"]
    for name in names:
        await store.put(f"/n/{name}", b"x")
    expected = sorted({name.split("/")[0] for name in names})
    assert await store.list_children("/n") == expected


# --- multi ---------------------------------------------------------------------------------


async def test_multi_applies_every_op(store: MetadataStore) -> None:
    await store.put("/old", b"x")
    await store.put("/kept", b"v0")
    await store.multi(
        [
            Op("/new", b"n", expected_version=-1),
            Op("/kept", b"v1", expected_version=0),
            Op("/old", None),
        ]
    )
    new, kept = await store.get("/new"), await store.get("/kept")
    assert new is not None and (new.value, new.stat.version) == (b"n", 0)
    assert kept is not None and (kept.value, kept.stat.version) == (b"v1", 1)
    assert await store.get("/old") is None


async def test_later_ops_of_a_multi_see_the_earlier_ones(store: MetadataStore) -> None:
    await store.multi(
        [
            Op("/n", b"1", expected_version=-1),
            Op("/n", b"2", expected_version=0),
            Op("/gone", b"x"),
            Op("/gone", None, expected_version=0),
        ]
    )
    node = await store.get("/n")
    assert node is not None and (node.value, node.stat.version) == (b"2", 1)
    assert await store.get("/gone") is None


@pytest.mark.parametrize(
    ("failing", "error"),
    [
        (Op("/existing", b"x", expected_version=-1), NodeExistsError),
        (Op("/existing", b"x", expected_version=7), BadVersionError),
        (Op("/missing", b"x", expected_version=0), NotFoundError),
        (Op("/missing", None), NotFoundError),
        (Op("not-a-path", b"x"), MetadataError),
    ],
)
async def test_multi_with_a_failing_op_in_the_middle_changes_nothing(
    store: MetadataStore, failing: Op, error: type[MetadataError]
) -> None:
    await store.put("/existing", b"before")
    before = await store.get("/existing")
    seen: list[Notification] = []
    store.watch("/", seen.append)

    with pytest.raises(error):
        await store.multi(
            [Op("/first", b"x"), Op("/existing", b"changed"), failing, Op("/last", b"x")]
        )

    assert await store.get("/first") is None
    assert await store.get("/existing") == before
    assert await store.get("/last") is None
    assert seen == []


async def test_multi_of_no_ops_does_nothing(store: MetadataStore) -> None:
    await store.multi([])
    assert await store.list_children("/") == []


# --- watch ---------------------------------------------------------------------------------


async def test_watch_reports_changes_at_or_under_its_prefix_until_cancelled(
    store: MetadataStore,
) -> None:
    seen: list[Notification] = []
    cancel = store.watch("/w", seen.append)

    await store.put("/w", b"x")
    await store.put("/w/x", b"1")
    await store.put("/w/x", b"2")
    await store.put("/wx", b"not under /w")
    await store.put("/other/w", b"not under /w")
    await store.delete("/w/x")
    await store.multi([Op("/w/y", b"1"), Op("/w", None), Op("/z", b"not under /w")])

    assert seen == [
        Notification("/w", "created"),
        Notification("/w/x", "created"),
        Notification("/w/x", "modified"),
        Notification("/w/x", "deleted"),
        Notification("/w/y", "created"),
        Notification("/w", "deleted"),
    ]

    cancel()
    cancel()  # cancelling twice is harmless
    await store.put("/w/z", b"after cancel")
    assert len(seen) == 6


async def test_a_watch_on_the_root_sees_everything(store: MetadataStore) -> None:
    seen: list[Notification] = []
    store.watch("/", seen.append)
    await store.put("/a", b"x")
    await store.put("/b/c", b"x")
    await store.delete_recursive("/b")
    assert seen == [
        Notification("/a", "created"),
        Notification("/b/c", "created"),
        Notification("/b/c", "deleted"),
    ]


async def test_a_failed_write_notifies_nobody(store: MetadataStore) -> None:
    await store.put("/a", b"x")
    seen: list[Notification] = []
    store.watch("/", seen.append)
    with pytest.raises(BadVersionError):
        await store.put("/a", b"y", expected_version=3)
    with pytest.raises(NotFoundError):
        await store.delete("/b")
    assert seen == []


async def test_watchers_hear_of_a_write_whose_caller_was_cancelled(store: MetadataStore) -> None:
    seen: list[Notification] = []
    store.watch("/", seen.append)
    put = asyncio.create_task(store.put("/a", b"x"))
    await asyncio.sleep(0)  # one step of the loop: let the put start, then cancel it
    put.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await put
    # A cancelled put may or may not have happened; watchers must agree with the store.
    # With ZooKeeper both may settle after the cancel: the watch event can reach the loop
    # after the read's answer, and the put itself, already on its way, can land after a
    # read that found nothing (seen once in a full run). Wait until they agree.
    async with asyncio.timeout(10):
        while bool(seen) != (written := await store.exists("/a")):
            await asyncio.sleep(0.01)
    assert seen == ([Notification("/a", "created")] if written else [])


async def test_a_failing_watcher_fails_neither_the_write_nor_other_watchers(
    store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(note: Notification) -> None:
        raise RuntimeError("watcher bug")

    seen: list[Notification] = []
    store.watch("/", broken)
    store.watch("/", seen.append)
    with caplog.at_level(logging.ERROR):
        await store.put("/a", b"x")

    assert seen == [Notification("/a", "created")]
    assert await store.exists("/a")
    assert "watcher bug" in caplog.text


# --- closing and bad input -----------------------------------------------------------------

CALLS: dict[str, Callable[[MetadataStore], Awaitable[object]]] = {
    "get": lambda s: s.get("/a"),
    "put": lambda s: s.put("/a", b"x"),
    "delete": lambda s: s.delete("/a"),
    "list_children": lambda s: s.list_children("/"),
    "multi": lambda s: s.multi([Op("/a", b"x")]),
    "exists": lambda s: s.exists("/a"),
    "delete_recursive": lambda s: s.delete_recursive("/a"),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
async def test_every_call_on_a_closed_store_raises_closed(
    store: MetadataStore, call: Callable[[MetadataStore], Awaitable[object]]
) -> None:
    await store.put("/a", b"x")
    await store.aclose()
    with pytest.raises(ClosedError):
        await call(store)
    with pytest.raises(ClosedError):
        store.watch("/", print)
    await store.aclose()  # closing twice is fine


async def test_async_with_closes_the_store(make_store: StoreFactory) -> None:
    async with make_store() as store:
        await store.put("/a", b"x")
    with pytest.raises(ClosedError):
        await store.get("/a")


BAD_PATHS = ["", "a", "a/b", "/a/", "//a", "/a//b", "/a\0b", "/\ud800"]


@pytest.mark.parametrize("path", [*BAD_PATHS, "/"])
async def test_a_malformed_node_path_is_refused(store: MetadataStore, path: str) -> None:
    with pytest.raises(MetadataError, match="path"):
        await store.put(path, b"x")
    with pytest.raises(MetadataError, match="path"):
        await store.delete(path)
    with pytest.raises(MetadataError, match="path"):
        await store.multi([Op(path, b"x")])


@pytest.mark.parametrize("path", BAD_PATHS)
async def test_a_malformed_prefix_is_refused(store: MetadataStore, path: str) -> None:
    with pytest.raises(MetadataError, match="path"):
        await store.get(path)
    with pytest.raises(MetadataError, match="path"):
        await store.list_children(path)
    with pytest.raises(MetadataError, match="path"):
        store.watch(path, print)


async def test_a_meaningless_expected_version_is_refused(store: MetadataStore) -> None:
    with pytest.raises(MetadataError, match="expected_version"):
        await store.put("/a", b"x", expected_version=-2)
    with pytest.raises(MetadataError, match="expected_version"):
        await store.delete("/a", expected_version=-1)  # "delete only if absent" means nothing
    assert await store.get("/a") is None


# --- concurrency and a model ---------------------------------------------------------------


async def test_concurrent_read_modify_write_loses_no_increment(store: MetadataStore) -> None:
    workers = 20
    await store.put("/counter", b"0")
    everyone_has_read = asyncio.Barrier(workers)
    conflicts = 0

    async def increment() -> None:
        nonlocal conflicts
        current = await store.get("/counter")
        await everyone_has_read.wait()  # all read version 0 before anyone writes: a real race
        while True:
            assert current is not None
            value = str(int(current.value) + 1).encode()
            try:
                await store.put("/counter", value, expected_version=current.stat.version)
                return
            except BadVersionError:
                conflicts += 1
                current = await store.get("/counter")

    await asyncio.gather(*(increment() for _ in range(workers)))

    final = await store.get("/counter")
    assert final is not None
    assert (final.value, final.stat.version) == (b"20", 20)
    assert conflicts >= workers - 1


MODEL_PATHS = ["/a", "/a/b", "/a/b/c", "/ab", "/b"]
_versions = st.none() | st.integers(min_value=-1, max_value=3)
_ops = st.one_of(
    st.builds(Op, st.sampled_from(MODEL_PATHS), st.binary(max_size=4), _versions),
    st.builds(Op, st.sampled_from(MODEL_PATHS), st.none(), st.none() | st.integers(0, 3)),
)
_steps = st.lists(st.one_of(_ops, st.lists(_ops, min_size=1, max_size=4)), max_size=25)

Model = dict[str, tuple[bytes, int]]  # path -> (value, version)


def model_apply(model: Model, op: Op) -> type[MetadataError] | None:
    """Apply ``op`` to ``model`` as the contract says; the error it must raise, if any."""
    current = model.get(op.path)
    versioned = op.expected_version is not None and op.expected_version >= 0
    if current is None and (op.value is None or versioned):
        return NotFoundError
    if current is not None and op.expected_version == -1:
        return NodeExistsError
    if current is not None and op.expected_version not in (None, -1, current[1]):
        return BadVersionError
    if op.value is None:
        del model[op.path]
    else:
        model[op.path] = (op.value, current[1] + 1 if current else 0)
    return None


def model_multi(model: Model, ops: list[Op]) -> type[MetadataError] | None:
    scratch = dict(model)
    for op in ops:
        error = model_apply(scratch, op)
        if error is not None:
            return error
    model.clear()
    model.update(scratch)
    return None


async def store_apply(store: MetadataStore, step: Op | list[Op]) -> type[Exception] | None:
    try:
        if isinstance(step, list):
            await store.multi(step)
        elif step.value is None:
            await store.delete(step.path, expected_version=step.expected_version)
        else:
            await store.put(step.path, step.value, expected_version=step.expected_version)
    except MetadataError as e:
        return type(e)
    return None


# make_store hands out a fresh store per example, so sharing the fixture across examples is
# what we want; the deadline is off because SQLite fsyncs each write.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(steps=_steps)
async def test_random_puts_and_deletes_match_a_dict(
    make_store: StoreFactory, steps: list[Op | list[Op]]
) -> None:
    model: Model = {}
    async with make_store() as store:
        for step in steps:
            if isinstance(step, list):
                expected = model_multi(model, step)
            else:
                expected = model_apply(model, step)
            assert await store_apply(store, step) == expected, step
        for path in MODEL_PATHS:
            node = await store.get(path)
            found = None if node is None else (node.value, node.stat.version)
            assert found == model.get(path), path
        for parent in ["/", "/a", "/a/b"]:
            prefix = parent.rstrip("/") + "/"
            names = {p[len(prefix) :].split("/")[0] for p in model if p.startswith(prefix)}
            assert await store.list_children(parent) == sorted(names)


# --- SQLite only ---------------------------------------------------------------------------


async def test_sqlite_values_survive_close_and_reopen(sqlite_path: Path) -> None:
    async with SqliteMetadataStore(sqlite_path) as store:
        await store.put("/a", b"x")
        stat = await store.put("/a", b"y")
        await store.put("/b/c", b"z")
        await store.put("/gone", b"z")
        await store.delete("/gone")

    async with SqliteMetadataStore(sqlite_path) as store:
        node = await store.get("/a")
        assert node is not None
        assert (node.value, node.stat) == (b"y", stat)
        assert await store.list_children("/") == ["a", "b"]
        assert await store.get("/gone") is None


async def test_sqlite_second_handle_sees_writes_and_their_versions(sqlite_path: Path) -> None:
    async with (
        SqliteMetadataStore(sqlite_path) as first,
        SqliteMetadataStore(sqlite_path) as second,
    ):
        await first.put("/a", b"from first")
        node = await second.get("/a")
        assert node is not None and node.value == b"from first"

        await first.put("/a", b"again")
        with pytest.raises(BadVersionError):
            await second.put("/a", b"stale", expected_version=node.stat.version)
        await second.delete("/a", expected_version=1)
        assert await first.get("/a") is None


async def test_sqlite_handles_racing_on_one_file_lose_no_increment(sqlite_path: Path) -> None:
    workers = 20
    async with (
        SqliteMetadataStore(sqlite_path) as first,
        SqliteMetadataStore(sqlite_path) as second,
    ):
        await first.put("/counter", b"0")
        everyone_has_read = asyncio.Barrier(workers)

        async def increment(store: MetadataStore) -> None:
            current = await store.get("/counter")
            await everyone_has_read.wait()
            while True:
                assert current is not None
                value = str(int(current.value) + 1).encode()
                try:
                    await store.put("/counter", value, expected_version=current.stat.version)
                    return
                except BadVersionError:
                    current = await store.get("/counter")

        await asyncio.gather(*(increment((first, second)[i % 2]) for i in range(workers)))
        final = await second.get("/counter")
        assert final is not None
        assert (final.value, final.stat.version) == (b"20", 20)


async def test_sqlite_finishes_a_write_whose_caller_was_cancelled(sqlite_path: Path) -> None:
    async with SqliteMetadataStore(sqlite_path) as store:
        seen: list[Notification] = []
        store.watch("/", seen.append)
        put = asyncio.create_task(store.put("/a", b"x"))
        await asyncio.sleep(0)  # one step of the loop: the put reaches the worker thread
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put
        # The worker runs calls in order, so this get runs after the put completed.
        assert await store.exists("/a")
        assert seen == [Notification("/a", "created")]


async def test_sqlite_refuses_a_file_that_is_not_a_database(sqlite_path: Path) -> None:
    garbage = b"this is not a database, it is a shopping list\n" * 100
    sqlite_path.write_bytes(garbage)
    with pytest.raises(MetadataError, match=str(sqlite_path)):
        SqliteMetadataStore(sqlite_path)
    assert sqlite_path.read_bytes() == garbage


async def test_sqlite_refuses_the_database_of_another_program(sqlite_path: Path) -> None:
    other = sqlite3.connect(sqlite_path)
    with other:
        other.execute("CREATE TABLE accounts (id INTEGER)")
    other.close()

    with pytest.raises(MetadataError, match=str(sqlite_path)):
        SqliteMetadataStore(sqlite_path)

    other = sqlite3.connect(sqlite_path)
    try:  # untouched: not even switched to WAL
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        other.close()


async def test_sqlite_refuses_a_path_it_cannot_create(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_bytes(b"")
    path = tmp_path / "plain-file" / "meta.db"  # its "directory" is a file
    with pytest.raises(MetadataError, match=str(path)):
        SqliteMetadataStore(path)


async def test_sqlite_commits_are_fsynced_write_ahead_log(sqlite_path: Path) -> None:
    async with SqliteMetadataStore(sqlite_path) as store:
        assert await store.pragmas() == {"journal_mode": "wal", "synchronous": "FULL"}
        await store.put("/a", b"x")

    raw = sqlite3.connect(sqlite_path)  # WAL mode is recorded in the file itself
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


# --- open_store ----------------------------------------------------------------------------


async def test_open_store_memory() -> None:
    async with open_store("memory:") as store:
        assert isinstance(store, MemoryMetadataStore)


async def test_open_store_sqlite_absolute_path_creates_parent_dirs(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "meta.db"
    async with open_metadata_store(f"sqlite:///{path}") as store:
        assert isinstance(store, SqliteMetadataStore)
        await store.put("/a", b"x")
    assert path.is_file()


async def test_open_store_sqlite_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_store("sqlite:///data/meta.db") as store:
        await store.put("/a", b"x")
    assert (tmp_path / "data" / "meta.db").is_file()


@pytest.mark.parametrize(
    "url", ["", "zookeeper://localhost:2181", "sqlite://meta.db", "sqlite:///", "memory"]
)
def test_open_store_refuses_other_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="metadata_url") as caught:
        open_store(url)
    assert caught.value.setting == "metadata_url"
    assert "sqlite:///" in caught.value.message
