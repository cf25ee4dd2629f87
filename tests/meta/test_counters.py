"""Counters: blocks of numbers never handed out twice, and moving a counter past numbers
handed out elsewhere (reserve_through: the ledger upgrade's segment ids)."""

from __future__ import annotations

import asyncio

from magnetar.meta.counters import reserve_block, reserve_through
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.testing.clock import ManualClock

PATH = "/counters/test"


async def test_blocks_follow_each_other() -> None:
    meta = MemoryMetadataStore(clock=ManualClock())
    assert [await reserve_block(meta, PATH, 10) for _ in range(3)] == [0, 10, 20]


async def test_reserve_through_moves_the_counter_past_a_number_and_never_back() -> None:
    meta = MemoryMetadataStore(clock=ManualClock())
    await reserve_through(meta, PATH, 41)  # on a counter never used
    assert await reserve_block(meta, PATH, 5) == 42
    await reserve_through(meta, PATH, 3)  # below: nothing changes
    await reserve_through(meta, PATH, 46)  # the last number of the block: the next is above
    assert await reserve_block(meta, PATH, 5) == 47


async def test_concurrent_callers_all_end_above_their_number() -> None:
    meta = MemoryMetadataStore(clock=ManualClock())
    await asyncio.gather(*(reserve_through(meta, PATH, n) for n in (7, 90, 30, 60)))
    assert await reserve_block(meta, PATH, 1) == 91
