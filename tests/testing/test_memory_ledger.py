"""The in-memory ledger of magnetar.testing behaves as a ledger on disk where dispatch tests
rely on it: segments and message ids, reads, trims, damaged entries, and it refuses what it
does not serve."""

from __future__ import annotations

import pytest

from magnetar.ledger import CorruptionError, OffsetOutOfRangeError
from magnetar.testing.clock import ManualClock
from magnetar.testing.memory_ledger import MemoryStorage, MemoryStorageError, memory_ledger


async def test_entries_roll_into_segments_and_read_back() -> None:
    clock = ManualClock()
    ledger = await memory_ledger(entries_per_segment=3, clock=clock)
    for i in range(7):
        await ledger.append(f"v{i}".encode(), count=2 if i == 4 else 1)
    assert ledger.end_offset == 8
    got = await ledger.read(4, max_entries=10)  # the entry at 4 holds offsets 4 and 5
    assert [(e.base_offset, e.count) for e in got] == [(4, 2), (6, 1), (7, 1)]
    assert got[0].publish_time == clock.now_ms()
    ids = [ledger.message_id(e) for e in got]
    assert [(i.ledger_id, i.entry_id) for i in ids] == [(2, 1), (2, 3), (3, 0)]
    assert [(s.first_offset, s.end_offset) for s in ledger.segments()] == [(0, 3), (3, 7), (7, 8)]
    assert await ledger.read(8) == []


async def test_trim_drops_closed_segments_and_reads_below_fail() -> None:
    ledger = await memory_ledger(entries_per_segment=2)
    for _ in range(5):
        await ledger.append(b"x")
    gone = await ledger.trim(4)
    assert [s.segment_id for s in gone] == [1, 2]
    assert ledger.start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        await ledger.read(1)
    assert [e.base_offset for e in await ledger.read(4)] == [4]


async def test_a_damaged_entry_fails_reads_and_the_next_readable_offset_follows_it() -> None:
    ledger = await memory_ledger(entries_per_segment=10)
    for _ in range(5):
        await ledger.append(b"x")
    storage = ledger.storage
    assert isinstance(storage, MemoryStorage)
    storage.damage(ledger.name, 2)
    assert [e.base_offset for e in await ledger.read(0, max_entries=10)] == [0, 1]
    with pytest.raises(CorruptionError):
        await ledger.read(2)
    assert await ledger.next_readable(2) == 3
    assert ledger.damaged() == {1: "checksum mismatch"}
    with pytest.raises(MemoryStorageError, match="no object store"):
        await ledger.drop_local_copy(1)
