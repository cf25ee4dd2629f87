"""LocalSegments: the writer's segments in this process's engine, as a storage node keeps
a ledger (what the writer contract tests in test_writer.py cannot see: a restart, an entry
stored past a failure, a partition of another storage). On real engines in ``tmp_path``."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.core.config import Settings, build_settings
from magnetar.core.entries import Entry
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import RolloverPolicy, SegmentRecord, SegmentSpec
from magnetar.ledger.writer import SegmentIds, SegmentWriter
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import SegmentInfo, SegmentState, StorageEngine, StorageSettings
from magnetar.storage.errors import FencedError, StorageError, WriteFailedError
from magnetar.storage.ledger_records import Record
from magnetar.storage.ledger_store import LedgerStore
from magnetar.testing.clock import ManualClock

NAME = "public/default/local"


class Node:
    """One data directory as a process sees it: SQLite metadata, engine, store, writer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.meta: MetadataStore | None = None
        self.engine: StorageEngine | None = None

    async def open(self, *, max_entries: int = 0) -> tuple[LocalSegments, SegmentWriter]:
        self.meta = open_metadata_store(self.settings.metadata)
        self.engine = await StorageEngine.open(StorageSettings.of(self.settings), self.meta)
        store = await LedgerStore.open(self.engine, self.settings.data_dir / "fenced.json")
        segments = LocalSegments(store)
        policy = RolloverPolicy(1 << 30, max_entries=max_entries)
        writer = await SegmentWriter.open(
            NAME, segments, self.meta, SegmentIds(self.meta), policy, ManualClock()
        )
        return segments, writer

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.aclose()
        if self.meta is not None:
            await self.meta.aclose()
        self.engine = self.meta = None


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(build_settings(env={}, overrides={"data_dir": tmp_path / "data"}))
    yield n
    await n.close()


async def _read_all(segments: LocalSegments, writer: SegmentWriter) -> list[bytes]:
    out = []
    for info in writer.segments():
        entries = await segments.read(info.segment_id, 0, 1 << 30)
        out += [e.payload for e in entries]
    return out


async def test_segments_and_their_ends_survive_a_clean_restart(node: Node) -> None:
    segments, writer = await node.open(max_entries=2)
    for i in range(5):
        await writer.append(b"m%d" % i)
    await writer.close_open()
    await node.close()
    segments, writer = await node.open(max_entries=2)
    assert writer.recovered == 0 and writer.end == 5
    assert [i.state for i in writer.segments()] == [SegmentState.CLOSED] * 3
    assert await _read_all(segments, writer) == [b"m%d" % i for i in range(5)]
    assert (await writer.append(b"m5")).base_offset == 5
    first = writer.segments()[0].segment_id
    assert await segments.last_confirmed(first) == 1 and segments.sealed(first) == 1


async def test_an_entry_stored_past_a_gap_is_never_read_and_recovery_ends_before_it(
    node: Node,
) -> None:
    """An append that landed after an earlier one failed (a later group commit) lies past
    the segment's prefix: recovery closes the segment at the prefix, reads stop there."""
    segments, writer = await node.open()
    for i in range(3):
        await writer.append(b"a%d" % i)
    sid = writer.segments()[-1].segment_id
    # entry 3 failed, entry 4 was stored; then the process died
    await segments.store.add(sid, Record(4, 4, 1, 0, -1, 0, b"orphan"))
    await node.close()
    segments, writer = await node.open()
    assert writer.recovered == 1 and writer.end == 3
    assert segments.store.is_fenced(sid)
    assert await segments.read(sid, 0, 10) == (await segments.read(sid, 0, 2))
    assert [e.payload for e in await segments.read(sid, 0, 10)] == [b"a0", b"a1", b"a2"]
    assert await segments.read(sid, 3, 10) == []
    assert (await writer.append(b"next")).base_offset == 3
    assert await _read_all(segments, writer) == [b"a0", b"a1", b"a2", b"next"]


async def test_a_fenced_segment_refuses_the_old_writers_appends(node: Node) -> None:
    segments, old = await node.open()
    await old.append(b"x")
    sid = old.segments()[-1].segment_id
    assert await segments.fence(sid) == 0
    with pytest.raises(FencedError, match="fenced"):
        await old.append(b"late")
    with pytest.raises(FencedError):
        await old.append(b"later")


async def test_a_segment_of_replicated_storage_is_refused_with_a_clear_error(node: Node) -> None:
    segments, _ = await node.open()
    info = SegmentInfo(900, 0, SegmentState.CLOSED, 0, 10, entries=10)

    async def persist(placement: object) -> None:
        raise AssertionError("not called")

    spec = SegmentSpec(NAME, SegmentRecord(info), persist)
    placement = {"quorum": [3, 2, 2], "ensembles": [[0, ["n1", "n2", "n3"]]], "lastEntry": 4}
    with pytest.raises(StorageError, match=r"not stored locally.*\(magnetar broker\)"):
        segments.attach(spec, placement)
    segments.attach(spec, {"local": True})
    segments.attach(spec, {})
    assert segments.sealed(900) == 9


async def test_appends_to_many_segments_share_group_commits(node: Node) -> None:
    segments, writer = await node.open()
    meta, engine = node.meta, node.engine
    assert meta is not None and engine is not None
    other = await SegmentWriter.open(
        "public/default/other",
        segments,
        meta,
        SegmentIds(meta),
        RolloverPolicy(1 << 30),
        ManualClock(),
    )
    before = engine.stats.flushes
    appends = [w.append(b"g") for _ in range(200) for w in (writer, other)]
    await asyncio.gather(*appends)
    assert engine.stats.flushes - before < 400  # fewer fsyncs than appends
    assert writer.end == other.end == 200


async def test_an_append_the_engine_fails_fails_every_later_one_of_its_segment(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fails one group commit (an fsync error, injected): that append fails, the
    segment refuses every later append even once the disk is fine, and the writer goes on
    in a new segment from the last acknowledged entry."""
    segments, writer = await node.open()
    await writer.append(b"kept")
    sid = writer.segments()[-1].segment_id
    fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(WriteFailedError):
        await writer.append(b"lost")
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(WriteFailedError):  # the segment itself, not only the writer
        await segments.append(sid, 1, Entry(1, 1, 0, -1, 0, b"late", sid))
    assert (await writer.append(b"next")).base_offset == 1
    first, second = writer.segments()
    assert (first.segment_id, first.state, first.entries) == (sid, SegmentState.CLOSED, 1)
    assert (second.state, second.first_offset, second.entries) == (SegmentState.OPEN, 1, 1)
    assert await _read_all(segments, writer) == [b"kept", b"next"]
