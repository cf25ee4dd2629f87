"""Behaviour of the storage engine through its public API, on real files with fsync."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import pytest

from magnetar.core.entries import Entry
from magnetar.core.errors import ClosedError
from magnetar.storage import (
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    SegmentState,
    StorageEngine,
)
from magnetar.storage.errors import InvalidEntryError
from tests.storage.conftest import OpenEngine, reopen


async def read_all(engine: StorageEngine, name: str, start: int = 0) -> list[tuple[int, bytes]]:
    out, offset = [], start
    while True:
        got = await engine.read(name, offset, max_entries=50, max_bytes=64 * 1024)
        if not got:
            return out
        out += [(e.base_offset, e.payload) for e in got]
        offset = got[-1].next_offset


async def test_append_returns_continuous_offsets_and_reads_back(open_engine: OpenEngine) -> None:
    engine = await open_engine()
    await engine.create_partition("p")
    a = await engine.append("p", b"one")
    b = await engine.append("p", b"batch-of-three", count=3)
    c = await engine.append("p", b"four")
    assert (a.base_offset, b.base_offset, c.base_offset) == (0, 1, 4)
    assert engine.end_offset("p") == 5
    assert await read_all(engine, "p") == [(0, b"one"), (1, b"batch-of-three"), (4, b"four")]
    # An offset inside a batch returns the whole entry holding it.
    [entry] = await engine.read("p", 2, max_entries=1)
    assert (entry.base_offset, entry.count) == (1, 3)


async def test_concurrent_appends_share_one_fsync(open_engine: OpenEngine) -> None:
    engine = await open_engine()
    await engine.create_partition("p")
    results = await asyncio.gather(*(engine.append("p", b"x%d" % i) for i in range(50)))
    assert sorted(e.base_offset for e in results) == list(range(50))
    # All 50 were queued before the flusher ran: far fewer fsyncs than appends.
    assert engine.stats.fsyncs < 10
    assert engine.stats.entries == 50


async def test_submit_queues_in_call_order_and_tells_each_outcome_once(
    open_engine: OpenEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The future-less append (the ledger store's): offsets follow the calls, each callback
    is told its entry once, and a callback that raises is logged, never the group's loss."""
    engine = await open_engine()
    await engine.create_partition("p")
    told: list[tuple[str, Entry | BaseException]] = []
    done = asyncio.Event()

    def then(tag: str) -> Callable[[Entry | BaseException], None]:
        def record(outcome: Entry | BaseException) -> None:
            told.append((tag, outcome))
            if tag == "bad":
                raise RuntimeError("a bug in the caller's bookkeeping")
            if len(told) == 3:
                done.set()

        return record

    with caplog.at_level(logging.ERROR, logger="magnetar.storage.engine"):
        engine.submit("p", b"a", then("a"))
        engine.submit("p", b"bad", then("bad"), count=2)
        engine.submit("p", b"c", then("c"))
        with pytest.raises(InvalidEntryError):  # refused at once, nothing queued or told
            engine.submit("p", b"d", then("d"), count=0)
        await asyncio.wait_for(done.wait(), 10)
    entries = [(tag, e.base_offset) for tag, e in told if isinstance(e, Entry)]
    assert entries == [("a", 0), ("bad", 1), ("c", 3)]
    assert any("completion of an append to p failed" in r.getMessage() for r in caplog.records)
    assert await read_all(engine, "p") == [(0, b"a"), (1, b"bad"), (3, b"c")]
    # an append whose caller went away is written all the same
    gone = asyncio.ensure_future(engine.append("p", b"gone"))
    await asyncio.sleep(0)
    gone.cancel()
    assert (await engine.append("p", b"after")).base_offset == 5
    assert await read_all(engine, "p", 4) == [(4, b"gone"), (5, b"after")]


async def test_rollover_by_bytes_entries_and_age(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_bytes=1000, segment_max_entries=3)
    await engine.create_partition("p")
    for i in range(10):
        await engine.append("p", bytes(100) + bytes([i]))
    segments = engine.segments("p")
    assert len(segments) >= 4
    assert all(s.state is SegmentState.CLOSED for s in segments[:-1])
    assert segments[-1].state is SegmentState.OPEN
    assert all(s.entries <= 3 for s in segments)
    # Segments tile the offsets without gaps.
    for before, after in itertools.pairwise(segments):
        assert before.end_offset == after.first_offset


async def test_age_rollover_closes_an_idle_segment(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_age=0.05)
    await engine.create_partition("p")
    await engine.append("p", b"old")
    for _ in range(200):  # the age task runs every ~12 ms; bounded wait, no fixed sleep
        if len(engine.segments("p")) > 1:
            break
        await asyncio.sleep(0.01)
    assert engine.segments("p")[0].state is SegmentState.CLOSED


async def test_reads_from_segment_files_when_not_cached(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_bytes=4096, tail_cache_bytes=512)
    await engine.create_partition("p")
    payloads = [bytes([i % 256]) * (i * 7 % 300 + 1) for i in range(300)]
    for p in payloads:
        await engine.append("p", p)
    assert [p for _, p in await read_all(engine, "p")] == payloads
    assert [p for _, p in await read_all(engine, "p", 150)] == payloads[150:]


async def test_data_survives_reopen(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_bytes=2048)
    await engine.create_partition("p")
    await engine.create_partition("q")
    for i in range(100):
        await engine.append("p" if i % 2 else "q", b"m%03d" % i)
    before = (await read_all(engine, "p"), await read_all(engine, "q"))
    engine = await reopen(engine, open_engine, segment_max_bytes=2048)
    assert (await read_all(engine, "p"), await read_all(engine, "q")) == before
    nxt = await engine.append("p", b"after")
    assert nxt.base_offset == 50


async def test_find_offset_by_publish_time(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_bytes=600)
    await engine.create_partition("p")
    # Publish times with a producer clock that goes back once: 100, 110, ..., then 105.
    times = [100 + 10 * i for i in range(20)] + [105, 400]
    for t in times:
        await engine.append("p", bytes(50), publish_time=t)
    for ts in (0, 100, 101, 150, 290, 295, 300, 400):
        want = next((i for i, t in enumerate(times) if t >= ts), len(times))
        assert await engine.find_offset("p", ts) == want, ts
    assert await engine.find_offset("p", 10_000) == engine.end_offset("p")


async def test_bad_calls_get_clear_errors(open_engine: OpenEngine) -> None:
    engine = await open_engine()
    with pytest.raises(PartitionNotFoundError, match="'nope' does not exist"):
        await engine.append("nope", b"x")
    await engine.create_partition("p")
    await engine.append("p", b"x")
    assert await engine.read("p", 5) == []
    with pytest.raises(OffsetOutOfRangeError):
        await engine.read("p", -1)
    await engine.aclose()
    with pytest.raises(ClosedError):
        await engine.append("p", b"late")


async def test_trim_deletes_only_closed_segments_wholly_before(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_entries=10)
    await engine.create_partition("p")
    for i in range(35):
        await engine.append("p", b"m%d" % i)
    deleted = await engine.trim("p", 25)
    assert [(s.first_offset, s.end_offset) for s in deleted] == [(0, 10), (10, 20)]
    assert engine.start_offset("p") == 20
    with pytest.raises(OffsetOutOfRangeError):
        await engine.read("p", 5)
    assert [o for o, _ in await read_all(engine, "p", 20)] == list(range(20, 35))
    assert not any(engine.ledger_dir.rglob("00000000000000000001.log"))
    engine = await reopen(engine, open_engine, segment_max_entries=10)
    assert engine.start_offset("p") == 20
    assert engine.end_offset("p") == 35


async def test_delete_partition_removes_data_and_name(open_engine: OpenEngine) -> None:
    engine = await open_engine()
    await engine.create_partition("p")
    await engine.append("p", b"x")
    await engine.delete_partition("p")
    assert not engine.has_partition("p")
    with pytest.raises(PartitionNotFoundError):
        await engine.read("p", 0)
    engine = await reopen(engine, open_engine)
    assert engine.partitions() == []
    await engine.create_partition("p")
    assert engine.end_offset("p") == 0
