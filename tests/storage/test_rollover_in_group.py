"""Segment rollover inside one group commit (issue 12): a burst of appends queued before the
flusher runs is one group, and a segment must still roll within one entry of its limit."""

from __future__ import annotations

import asyncio
import errno
import itertools
from typing import Any

import pytest

from magnetar.core.entries import Entry
from magnetar.storage import DiskFullError, SegmentState, catalog
from magnetar.storage.records import ENTRY_HEADER_SIZE
from tests.storage.conftest import OpenEngine, reopen

LIMIT = 4096


def _payloads(n: int) -> list[bytes]:
    # Sizes vary (100 B to ~1.1 KB) so entries straddle the limit at different points.
    return [bytes([i % 256]) * (100 + (i * 37) % 1000) for i in range(n)]


async def test_a_burst_rolls_between_entries_of_one_group(open_engine: OpenEngine) -> None:
    engine = await open_engine(segment_max_bytes=LIMIT)
    await engine.create_partition("a")
    await engine.create_partition("b")
    sent = _payloads(200)
    appends = [engine.append("a" if i % 3 else "b", p) for i, p in enumerate(sent)]
    entries = await asyncio.gather(*appends)
    # The burst was queued before the flusher ran: a few group commits, not one per entry,
    # and under fsync=always one journal fsync per group however many segments rolled.
    assert engine.stats.flushes < 10
    assert engine.stats.fsyncs == engine.stats.flushes
    largest = max(ENTRY_HEADER_SIZE + len(p) for p in sent)
    for name in ("a", "b"):
        closed = [s for s in engine.segments(name) if s.state is SegmentState.CLOSED]
        assert len(closed) >= 3
        too_big = [s.size for s in closed if s.size > LIMIT + largest]
        assert not too_big, f"closed segments of {name} over {LIMIT} + {largest}: {too_big}"
        assert all(s.size >= LIMIT for s in closed)  # and none rolled early
        segs = engine.segments(name)
        # Segments tile the offsets without gaps; each entry lies in the segment it names.
        assert all(x.end_offset == y.first_offset for x, y in itertools.pairwise(segs))
        by_id = {s.segment_id: s for s in segs}
        for e in (e for i, e in enumerate(entries) if (i % 3 != 0) == (name == "a")):
            seg = by_id[e.segment_id]
            assert seg.first_offset <= e.base_offset < seg.end_offset
    # Everything reads back in order, from the files as well as after a restart.
    engine = await reopen(engine, open_engine, segment_max_bytes=LIMIT)
    for name in ("a", "b"):
        wanted = [p for i, p in enumerate(sent) if (i % 3 != 0) == (name == "a")]
        got, offset = [], 0
        while chunk := await engine.read(name, offset, max_entries=64):
            got += [e.payload for e in chunk]
            offset = chunk[-1].next_offset
        assert got == wanted


async def test_a_failed_copy_after_a_roll_fails_only_the_later_entries(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the second run of a group is copied: the first run stays
    acknowledged, the rest fail with DiskFullError, their offsets are reused and the journal
    holds nothing of them (a restart brings none back)."""
    engine = await open_engine(segment_max_bytes=LIMIT)
    await engine.create_partition("p")
    real, calls = engine._copy, 0

    def copy(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first call copies run 0, inside the journal write
            raise OSError(errno.ENOSPC, "injected: no space left")
        real(*args)

    monkeypatch.setattr(engine, "_copy", copy)
    sent = [bytes([i]) * 1000 for i in range(12)]
    results = await asyncio.gather(*(engine.append("p", p) for p in sent), return_exceptions=True)
    kept = [r for r in results if isinstance(r, Entry)]
    failed = [r for r in results if not isinstance(r, Entry)]
    assert kept and failed and all(isinstance(r, DiskFullError) for r in failed)
    assert results[: len(kept)] == kept  # a prefix of the group: the first run
    after = await engine.append("p", b"after")
    assert after.base_offset == len(kept)  # no gap
    engine = await reopen(engine, open_engine, segment_max_bytes=LIMIT)
    got = await engine.read("p", 0, max_entries=100)
    assert [e.payload for e in got] == [*sent[: len(kept)], b"after"]


async def test_a_failed_roll_inside_a_group_appends_to_the_old_segment(
    open_engine: OpenEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roll that fails mid-group (metadata unavailable) fails no append: the group goes
    into the old segment, and a later group rolls it."""
    engine = await open_engine(segment_max_bytes=LIMIT)
    await engine.create_partition("p")
    real, calls = catalog.save_segment, 0

    async def save(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError(errno.EIO, "injected: metadata store unavailable")
        await real(*args)

    monkeypatch.setattr(catalog, "save_segment", save)
    sent = [bytes([i]) * 1000 for i in range(12)]
    entries = await asyncio.gather(*(engine.append("p", p) for p in sent))
    assert [e.base_offset for e in entries] == list(range(12))
    await engine.append("p", b"next group")
    segs = engine.segments("p")
    assert segs[0].entries == 8  # 4 entries reach the limit; the next 4 stayed (no roll)
    assert [s.state for s in segs[:-1]] == [SegmentState.CLOSED] * (len(segs) - 1)
    got = await engine.read("p", 0, max_entries=100)
    assert [e.payload for e in got] == [*sent, b"next group"]
