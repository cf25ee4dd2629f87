"""LocalStorage: standalone's LedgerStorage (the writer over this process's own ledgers)
as the managed ledger uses it: reads by offset across segments and after a restart, the
time index, an offloaded segment's reads, retention, damage, and the roll of an idle
segment by age. On real engines and SQLite metadata in ``tmp_path``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.core.config import Settings, build_settings
from magnetar.ledger.local_storage import LocalStorage
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import OffsetOutOfRangeError, SegmentState
from magnetar.storage.errors import CorruptionError, SegmentNotLocalError, StorageError
from magnetar.testing.clock import ManualClock
from magnetar.testing.held_segments import HeldSegments

NAME = "public/default/t-partition-0"


class Node:
    """One data directory: metadata and LocalStorage, opened and reopened."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.meta: MetadataStore | None = None
        self.storage: LocalStorage | None = None

    async def open(self, **overrides: Any) -> LocalStorage:
        settings = build_settings(
            env={}, overrides={"data_dir": self.settings.data_dir, **overrides}
        )
        self.meta = open_metadata_store(settings.metadata)
        self.storage = await LocalStorage.open(settings, self.meta, clock=self.clock)
        await self.storage.create_partition(NAME)
        return self.storage

    clock = ManualClock(1_000_000)

    async def close(self) -> None:
        if self.storage is not None:
            await self.storage.aclose()
        if self.meta is not None:
            await self.meta.aclose()
        self.storage = self.meta = None


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(build_settings(env={}, overrides={"data_dir": tmp_path / "data"}))
    yield n
    await n.close()


async def _append(storage: LocalStorage, n: int, *, count: int = 1, first_ts: int = 0) -> None:
    for i in range(n):
        await storage.append(NAME, b"e%d" % i, count=count, publish_time=first_ts + i)


async def _read_all(storage: LocalStorage, offset: int = 0) -> list[tuple[int, bytes]]:
    out = []
    while offset < storage.end_offset(NAME):
        got = await storage.read(NAME, offset, max_entries=3)
        assert got, f"nothing read at {offset}"
        out += [(e.base_offset, e.payload) for e in got]
        offset = got[-1].next_offset
    return out


async def test_reads_by_offset_cross_segments_and_survive_a_restart(node: Node) -> None:
    storage = await node.open(segment_max_entries=4)
    await _append(storage, 10, count=2)
    expected = [(2 * i, b"e%d" % i) for i in range(10)]
    assert await _read_all(storage) == expected
    # an offset inside an entry (a batch) reads from that entry
    assert (await storage.read(NAME, 7, max_entries=1))[0].base_offset == 6
    segments = storage.segments(NAME)
    assert [s.entries for s in segments] == [4, 4, 2]
    assert [s.first_offset for s in segments] == [0, 8, 16]
    await node.close()

    storage = await node.open(segment_max_entries=4)  # the tail is cold: from the store
    assert storage.end_offset(NAME) == 20
    assert await _read_all(storage) == expected
    entry = await storage.append(NAME, b"after")
    assert entry.base_offset == 20
    assert entry.segment_id > segments[-1].segment_id  # the closed one is not reopened


async def test_find_by_publish_time(node: Node) -> None:
    storage = await node.open(segment_max_entries=3)
    await _append(storage, 7, first_ts=100)
    assert await storage.find_offset(NAME, 0) == 0
    assert await storage.find_offset(NAME, 104) == 4
    assert await storage.find_offset(NAME, 1000) == storage.end_offset(NAME)
    second = storage.segments(NAME)[1]
    assert await storage.find_in_segment(NAME, second.segment_id, 105) == 5
    assert await storage.find_in_segment(NAME, second.segment_id, 1000) is None


async def test_an_offloaded_segment_without_local_copy_is_read_elsewhere(node: Node) -> None:
    storage = await node.open(segment_max_entries=2)
    await _append(storage, 5)
    first = storage.segments(NAME)[0]
    with pytest.raises(StorageError, match="not offloaded"):
        await storage.drop_local_copy(NAME, first.segment_id)
    await storage.update_segment(NAME, first.segment_id, state=SegmentState.OFFLOADED)
    await storage.drop_local_copy(NAME, first.segment_id)
    assert storage.store.ledger(first.segment_id) is None
    await node.close()
    storage = await node.open(segment_max_entries=2)  # a cold tail: the list tells
    assert not storage.segments(NAME)[0].local
    with pytest.raises(SegmentNotLocalError) as caught:
        await storage.read(NAME, 1)
    assert caught.value.segment_id == first.segment_id
    assert (await storage.read(NAME, 2))[0].payload == b"e2"


async def test_retention_trims_a_prefix_and_reads_before_it_are_out_of_range(
    node: Node,
) -> None:
    storage = await node.open(segment_max_entries=2)
    await _append(storage, 5)
    gone = await storage.trim(NAME, 4)
    assert [s.state for s in gone] == [SegmentState.DELETED] * 2
    assert storage.start_offset(NAME) == 4
    with pytest.raises(OffsetOutOfRangeError):
        await storage.read(NAME, 3)
    await node.close()
    storage = await node.open(segment_max_entries=2)
    assert storage.start_offset(NAME) == 4
    assert await _read_all(storage, 4) == [(4, b"e4")]


async def test_a_damaged_entry_is_corruption_with_its_file_and_the_rest_reads(
    node: Node,
) -> None:
    storage = await node.open(segment_max_entries=4)
    await _append(storage, 6)
    first = storage.segments(NAME)[0]
    await node.close()
    # flip a byte of the first segment's entry 1 in its engine file (written and closed)
    [target] = [p for p in node.settings.ledger_path.rglob("*.log") if b"e1" in p.read_bytes()]
    data = bytearray(target.read_bytes())
    data[data.find(b"e1")] ^= 0xFF
    target.write_bytes(bytes(data))

    storage = await node.open(segment_max_entries=4)
    assert (await storage.read(NAME, 0, max_entries=1))[0].payload == b"e0"
    with pytest.raises(CorruptionError):
        await storage.read(NAME, 1)
    # the engine finds entries again from its next index point on: none in so small a file
    assert await storage.next_readable(NAME, 1) == 4
    assert first.segment_id in storage.damaged(NAME)
    rows = await storage.check(NAME)
    assert rows[0]["segmentId"] == first.segment_id and rows[0]["error"]
    assert not rows[1]["error"]
    assert await _read_all(storage, 4) == [(4, b"e4"), (5, b"e5")]


async def test_an_idle_open_segment_is_closed_by_age(node: Node) -> None:
    storage = await node.open(segment_max_age=0.2)
    await _append(storage, 3)
    node.clock.advance(1000)
    deadline = asyncio.get_running_loop().time() + 30
    while len(storage.segments(NAME)) < 2:  # closed, then the next one opened
        assert asyncio.get_running_loop().time() < deadline, "the old segment was not rolled"
        await asyncio.sleep(0.05)
    first, *rest = storage.segments(NAME)
    assert first.entries == 3
    assert [(s.state, s.entries) for s in rest] == [(SegmentState.OPEN, 0)]  # the next one


async def test_a_partition_always_has_an_open_segment(node: Node) -> None:
    """As Pulsar's managed ledger: one at open, the next as soon as one is full."""
    storage = await node.open(segment_max_entries=2)
    [empty] = storage.segments(NAME)
    assert (empty.state, empty.entries) == (SegmentState.OPEN, 0)
    await _append(storage, 2)
    deadline = asyncio.get_running_loop().time() + 30
    while len(storage.segments(NAME)) < 2:
        assert asyncio.get_running_loop().time() < deadline, "the full segment was not rolled"
        await asyncio.sleep(0.01)
    full, following = storage.segments(NAME)
    assert (full.state, full.entries) == (SegmentState.CLOSED, 2)
    assert (following.state, following.entries) == (SegmentState.OPEN, 0)


async def test_appends_in_flight_are_not_in_the_end_offset(tmp_path: Path) -> None:
    """The end offset (Kafka's high watermark, backlogs, the last message id) counts only
    acknowledged entries: one still in flight has offsets, and may yet fail."""
    settings = build_settings(env={}, overrides={"data_dir": tmp_path / "data"})
    meta = open_metadata_store(settings.metadata)
    storage = await LocalStorage.open(settings, meta)
    try:
        held = HeldSegments(storage.segment_storage)
        storage.segment_storage = held  # type: ignore[assignment]
        await storage.create_partition(NAME)
        await storage.append(NAME, b"a")
        held.hold = True
        pending = asyncio.create_task(storage.append(NAME, b"b", count=3))
        while held.held == 0:
            await asyncio.sleep(0)
        assert storage.end_offset(NAME) == 1
        assert await storage.read(NAME, 1) == []
        held.release_appends()
        assert (await pending).base_offset == 1
        assert storage.end_offset(NAME) == 4
    finally:
        await storage.aclose()
        await meta.aclose()


async def test_restarts_leave_no_trail_of_empty_segments(node: Node) -> None:
    storage = await node.open()
    await _append(storage, 1)
    for _ in range(3):
        await node.close()
        storage = await node.open()
    states = [(s.state, s.entries) for s in storage.segments(NAME)]
    assert states == [(SegmentState.CLOSED, 1), (SegmentState.OPEN, 0)]
    assert len(storage.store) == 2  # no ledger left behind by the dropped empty ones
