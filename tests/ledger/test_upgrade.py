"""The data-directory upgrade from the engine's partitions to the managed ledger's layout:
on real engines and SQLite metadata in ``tmp_path``, data written through the engine's API,
read back through SegmentWriter + LocalSegments after a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.core.entries import Entry
from magnetar.ledger import upgrade as upgrade_module
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import RolloverPolicy
from magnetar.ledger.upgrade import (
    StepKind,
    UpgradeConflictError,
    UpgradeSpaceError,
    UpgradeStep,
    needs_upgrade,
    upgrade,
)
from magnetar.ledger.writer import SegmentIds, SegmentWriter, segment_list_path
from magnetar.storage import SegmentInfo, SegmentState, catalog
from magnetar.storage.ledger_records import Record
from magnetar.testing.clock import ManualClock
from magnetar.testing.processes import REPO_ROOT, python_env
from tests.ledger.upgrade_crash_child import (
    BATCH,
    FINISHED,
    OFFLOAD,
    Dir,
    open_dir,
    write_old_layout,
)

TIMEOUT_S = 60.0


@dataclass(slots=True)
class Old:
    """What the engine layout held: each partition's start, end, segments and the
    entries of its local segments by segment id (read by offset)."""

    start: dict[str, int]
    end: dict[str, int]
    segments: dict[str, list[SegmentInfo]]
    entries: dict[int, list[Entry]]


async def _snapshot(engine: Dir) -> Old:
    e = engine.engine
    old = Old({}, {}, {}, {})
    for name in needs_upgrade(e):
        old.start[name], old.end[name] = e.start_offset(name), e.end_offset(name)
        old.segments[name] = e.segments(name)
        for info in old.segments[name]:
            if info.local and info.entries:
                got = await e.read(name, info.first_offset, max_entries=info.entries)
                assert len(got) == info.entries
                old.entries[info.segment_id] = got
    return old


@pytest.fixture
async def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    opened = await open_dir(d)
    try:
        await write_old_layout(opened.engine)
    finally:
        await opened.aclose()
    return d


@pytest.fixture
async def old(data_dir: Path) -> Old:
    opened = await open_dir(data_dir)
    try:
        return await _snapshot(opened)
    finally:
        await opened.aclose()


@pytest.fixture
async def opened(data_dir: Path, old: Old) -> AsyncIterator[Dir]:
    """The directory open (after ``old`` read it: one opener at a time)."""
    d = await open_dir(data_dir)
    yield d
    await d.aclose()


async def _writer(d: Dir, name: str) -> tuple[LocalSegments, SegmentWriter]:
    segments = LocalSegments(d.store)
    writer = await SegmentWriter.open(
        name, segments, d.meta, SegmentIds(d.meta), RolloverPolicy(1 << 30), ManualClock()
    )
    return segments, writer


def _expected_segments(infos: list[SegmentInfo]) -> list[SegmentInfo]:
    """The old records as the new list must hold them: the empty OPEN segment left out,
    a non-empty one CLOSED (at any time)."""
    out = []
    for info in infos:
        if info.state is SegmentState.OPEN:
            if info.is_empty:
                continue
            info = dataclasses.replace(info, state=SegmentState.CLOSED)
        out.append(info)
    return out


async def _check_upgraded(data_dir: Path, old: Old) -> None:
    """Reopened after the upgrade: no old partition, every partition as it was, each
    entry stored once under its entry id, appends go on at the old end."""
    d = await open_dir(data_dir)
    try:
        assert needs_upgrade(d.engine) == []
        top = max(i.segment_id for infos in old.segments.values() for i in infos)
        for name, infos in old.segments.items():
            segments, writer = await _writer(d, name)
            assert writer.recovered == 0
            assert (writer.start, writer.end) == (old.start[name], old.end[name])
            got = writer.segments()
            assert [dataclasses.replace(i, closed_ms=0) for i in got] == [
                dataclasses.replace(i, closed_ms=0) for i in _expected_segments(infos)
            ]
            for info in got:
                if not info.local:
                    assert d.store.ledger(info.segment_id) is None
                    continue
                held = d.store.ledger(info.segment_id)
                assert held is not None and held.ids == list(range(info.entries))
                engine_name = f"L{info.segment_id}"
                stored = d.engine.end_offset(engine_name) - d.engine.start_offset(engine_name)
                assert stored == info.entries  # each entry once, none twice
                read = await segments.read(info.segment_id, 0, 1 << 30)
                assert read == old.entries[info.segment_id]
            appended = await writer.append(b"after")
            assert appended.base_offset == old.end[name]
            assert appended.segment_id > top
            assert await segments.read(appended.segment_id, 0, 0) == [appended]
    finally:
        await d.aclose()


async def test_upgrade_keeps_every_segment_id_offset_and_entry(
    data_dir: Path, old: Old, caplog: pytest.LogCaptureFixture
) -> None:
    a, b, c = "public/default/a", "public/default/b", "public/default/c"
    d = await open_dir(data_dir)
    try:
        assert needs_upgrade(d.engine) == [a, b, c]
        with caplog.at_level(logging.INFO, logger="magnetar.ledger.upgrade"):
            report = await upgrade(d.engine, d.store, d.meta)
        assert needs_upgrade(d.engine) == []
        assert not any(d.engine.has_partition(n) for n in (a, b, c))
    finally:
        await d.aclose()
    assert [(p.name, p.segments, p.resumed) for p in report.partitions] == [
        (a, 4, False),
        (b, 2, False),
        (c, 0, False),
    ]
    # a: its OFFLOADED segment without local copy is listed, not copied
    assert report.entries == 4 + 4 + 2 + 4 + 4
    assert f"upgrading {a}: segment 1 of 4, 4 entries" in caplog.messages
    assert "upgraded 3 partitions (6 segments, 18 entries," in caplog.text
    await _check_upgraded(data_dir, old)
    d = await open_dir(data_dir)
    try:
        [offloaded, kept, *_] = old.segments[a]  # the first one was trimmed
        _, writer = await _writer(d, a)
        by_id = {i.segment_id: i for i in writer.segments()}
        assert by_id[offloaded.segment_id].offload == OFFLOAD
        assert by_id[offloaded.segment_id].state is SegmentState.OFFLOADED
        assert not by_id[offloaded.segment_id].local
        assert by_id[kept.segment_id].local and by_id[kept.segment_id].offload == OFFLOAD
    finally:
        await d.aclose()


async def test_a_second_upgrade_changes_nothing(opened: Dir, data_dir: Path, old: Old) -> None:
    await upgrade(opened.engine, opened.store, opened.meta)
    lists = {n: await opened.meta.get(segment_list_path(n)) for n in old.segments}
    ledgers = opened.engine.partitions()
    again = await upgrade(opened.engine, opened.store, opened.meta)
    assert again.partitions == ()
    assert opened.engine.partitions() == ledgers
    for name, node in lists.items():
        assert node is not None and await opened.meta.get(segment_list_path(name)) == node
    await opened.aclose()
    await _check_upgraded(data_dir, old)


async def test_it_refuses_when_the_copy_cannot_fit(
    opened: Dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upgrade_module, "free_bytes", lambda path: 1000)
    before = needs_upgrade(opened.engine)
    with pytest.raises(UpgradeSpaceError, match=r"needs about .* MiB free .* only 0.0 MiB"):
        await upgrade(opened.engine, opened.store, opened.meta)
    assert needs_upgrade(opened.engine) == before == opened.engine.partitions()
    assert await opened.meta.get(segment_list_path(before[0])) is None


async def test_a_partition_listed_by_another_writer_is_left_alone(opened: Dir) -> None:
    """A segment list that lacks the old partition's segments was not made by the
    upgrade: deleting the old copy would lose it, so the upgrade stops with a clear error."""
    a = "public/default/a"
    await _writer(opened, a)  # a new writer made an empty list for the same name
    with pytest.raises(UpgradeConflictError, match=r"public/default/a is in both layouts"):
        await upgrade(opened.engine, opened.store, opened.meta)
    assert opened.engine.has_partition(a)


async def test_a_ledger_that_is_not_a_copy_of_its_segment_is_left_alone(
    opened: Dir, old: Old
) -> None:
    """A ledger of an old segment's id that starts elsewhere was written by something else
    (the new layout used before the upgrade): the upgrade does not delete it."""
    a = "public/default/a"
    local = [i for i in old.segments[a] if i.local]
    sid = local[0].segment_id
    await opened.store.add(sid, Record(0, 999_999, 1, 0, -1, 0, b"someone else's"))
    with pytest.raises(UpgradeConflictError, match=rf"ledger {sid} exists and is not a copy"):
        await upgrade(opened.engine, opened.store, opened.meta)
    assert opened.engine.has_partition(a)
    held = opened.store.ledger(sid)
    assert held is not None and held.ids == [0]
    assert await opened.meta.get(segment_list_path(a)) is None


async def test_an_offloading_segment_keeps_its_state_and_entries(tmp_path: Path) -> None:
    """OFFLOADING exists only while the engine runs (its recovery resets it to CLOSED), so
    the upgrade sees it only in the session that set it: it is listed as it is."""
    data_dir = tmp_path / "data"
    d = await open_dir(data_dir)
    try:
        await write_old_layout(d.engine)
        a = "public/default/a"
        busy = next(i for i in d.engine.segments(a) if i.state is SegmentState.CLOSED)
        await d.engine.update_segment(a, busy.segment_id, state=SegmentState.OFFLOADING)
        old = await _snapshot(d)
        await upgrade(d.engine, d.store, d.meta)
    finally:
        await d.aclose()
    assert SegmentState.OFFLOADING in [i.state for i in old.segments[a]]
    await _check_upgraded(data_dir, old)


class _Crash(Exception):
    pass


async def test_a_crash_inside_the_old_partitions_deletion_is_finished_by_a_rerun(
    data_dir: Path, old: Old
) -> None:
    """The engine deletes a partition's segment records, then its name: a crash between
    leaves the name, which the engine reopens empty. The rerun deletes it (state 2)."""
    a = "public/default/a"

    def stop(step: UpgradeStep) -> None:
        if step.kind is StepKind.LISTED:
            raise _Crash

    d = await open_dir(data_dir)
    try:
        with pytest.raises(_Crash):
            await upgrade(d.engine, d.store, d.meta, on_step=stop)
        node = await d.meta.get(catalog.partition_path(a))
        assert node is not None
        await d.meta.delete_recursive(catalog.segments_path(json.loads(node.value)["id"]))
    finally:
        await d.aclose()
    d = await open_dir(data_dir)
    try:
        assert [i.is_empty for i in d.engine.segments(a)] == [True]  # reopened empty
        report = await upgrade(d.engine, d.store, d.meta)
        assert report.partitions[0].name == a and report.partitions[0].resumed
    finally:
        await d.aclose()
    await _check_upgraded(data_dir, old)


async def _run_child(data_dir: Path, tmp_path: Path, kind: str, n: int) -> int:
    stderr = tmp_path / f"stderr-{kind}-{n}"
    with stderr.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.ledger.upgrade_crash_child",
            str(data_dir),
            kind,
            str(n),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=python_env(),
            cwd=REPO_ROOT,
        )
    async with asyncio.timeout(TIMEOUT_S):
        out, _ = await proc.communicate()
    assert proc.returncode is not None
    assert proc.returncode == -9 or out.decode().strip() == FINISHED, stderr.read_text()
    return proc.returncode


# (kind, n): kill -9 right after the n-th step of that kind. Partition a's copies come first
# (5 batches of BATCH entries or fewer, 3 ledgers), then b's (4 batches, 2 ledgers), then c.
# Then what the killed run left: (old partitions, segment lists, complete and partial ledgers).
KILLS = [
    ("copied", 1, (3, 0, 0, 1)),  # a's first ledger half copied
    ("ledger", 2, (3, 0, 2, 0)),  # two of a's ledgers complete, no list
    ("listed", 1, (3, 1, 3, 0)),  # a listed, its old partition still there
    ("deleted", 1, (2, 1, 3, 0)),  # a done
    ("copied", 6, (2, 1, 3, 1)),  # b's first ledger half copied
    ("listed", 3, (1, 3, 5, 0)),  # c listed (no ledgers), its old partition still there
]


async def _left(d: Dir, old: Old) -> tuple[int, int, int, int]:
    lists = [await d.meta.get(segment_list_path(n)) for n in old.segments]
    ledgers = [
        (d.store.ledger(i.segment_id), i.entries)
        for infos in old.segments.values()
        for i in infos
        if i.local and i.entries
    ]
    complete = sum(1 for held, n in ledgers if held is not None and len(held.ids) == n)
    partial = sum(1 for held, n in ledgers if held is not None and len(held.ids) < n)
    return len(needs_upgrade(d.engine)), sum(x is not None for x in lists), complete, partial


@pytest.mark.parametrize(("kind", "n", "left"), KILLS)
async def test_kill_9_at_any_step_then_a_rerun_finishes_the_job(
    data_dir: Path, old: Old, tmp_path: Path, kind: str, n: int, left: tuple[int, ...]
) -> None:
    assert BATCH < 4  # a segment of 4 entries takes two batches
    assert await _run_child(data_dir, tmp_path, kind, n) == -9
    d = await open_dir(data_dir)
    try:
        assert await _left(d, old) == left
        report = await upgrade(d.engine, d.store, d.meta)
    finally:
        await d.aclose()
    assert report.partitions[0].resumed == (kind == "listed")
    await _check_upgraded(data_dir, old)


async def test_two_kills_in_a_row_then_a_rerun(data_dir: Path, old: Old, tmp_path: Path) -> None:
    assert await _run_child(data_dir, tmp_path, "copied", 2) == -9
    assert await _run_child(data_dir, tmp_path, "copied", 2) == -9  # again mid-copy
    assert await _run_child(data_dir, tmp_path, "listed", 2) == -9
    assert await _run_child(data_dir, tmp_path, "listed", 99) == 0  # runs to its end
    await _check_upgraded(data_dir, old)
    d = await open_dir(data_dir)
    try:
        lists = [await d.meta.get(segment_list_path(n)) for n in old.segments]
        assert all(node is not None and json.loads(node.value)["ledgers"] for node in lists[:2])
    finally:
        await d.aclose()
