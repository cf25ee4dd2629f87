"""The managed ledger's writer over a segment-addressed storage (issue 13): it assigns
offsets and entry ids, rolls segments, keeps the segment list by compare-and-set and
recovers a crashed writer's open segment by fencing it. In-process, on the memory metadata
store, over every segment storage (``segments`` in conftest: :class:`MemorySegments`, and
:class:`LocalSegments` on a real engine)."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import RolloverPolicy, SegmentStorage
from magnetar.ledger.writer import (
    SegmentIds,
    SegmentWriter,
    recorded_segment,
    segment_list_path,
)
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.storage import SegmentState
from magnetar.storage.errors import FencedError, StorageError, WriteFailedError
from magnetar.testing.clock import ManualClock
from tests.ledger.conftest import Segments

NAME = "public/default/t"


async def _writer(
    meta: MemoryMetadataStore,
    storage: SegmentStorage,
    *,
    max_entries: int = 0,
    max_bytes: int = 1 << 30,
) -> SegmentWriter:
    policy = RolloverPolicy(max_bytes, max_entries=max_entries)
    return await SegmentWriter.open(NAME, storage, meta, SegmentIds(meta), policy, ManualClock())


async def _listed(meta: MemoryMetadataStore) -> list[dict[str, object]]:
    node = await meta.get(segment_list_path(NAME))
    assert node is not None
    return [row["info"] for row in json.loads(node.value)["ledgers"]]


async def test_the_writer_assigns_offsets_and_entry_ids_and_rolls(segments: Segments) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage, max_entries=3)
    entries = [await writer.append(b"x", count=2) for _ in range(7)]
    assert [e.base_offset for e in entries] == list(range(0, 14, 2))
    first, second, third = await _listed(meta)
    assert (first["state"], first["first_offset"], first["end_offset"]) == ("CLOSED", 0, 6)
    assert (second["state"], second["first_offset"], second["end_offset"]) == ("CLOSED", 6, 12)
    assert third["state"] == "OPEN" and third["first_offset"] == 12
    assert writer.end == 14 and writer.records[-1].info.end_offset == 14
    sid = int(first["segment_id"])
    one = await segments.stored(sid)
    assert sorted(one) == [0, 1, 2] and segments.sealed(sid) == 2
    assert [one[eid].base_offset for eid in sorted(one)] == [0, 2, 4]


async def test_acknowledgements_apply_in_entry_order(segments: Segments) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    segments.hold = True
    appends = [asyncio.ensure_future(writer.append(b"y")) for _ in range(5)]
    while segments.held < 5:
        await asyncio.sleep(0)
    assert writer.end == 5 and writer.records[-1].info.end_offset == 0  # none durable yet
    segments.release_appends()
    got = await asyncio.gather(*appends)
    assert [e.base_offset for e in got] == [0, 1, 2, 3, 4]
    assert writer.records[-1].info.end_offset == 5 and writer.records[-1].info.entries == 5


async def test_a_failed_append_ends_its_segment_and_the_next_reuses_its_offset(
    segments: Segments,
) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    await writer.append(b"a")
    sid = writer.records[-1].info.segment_id
    segments.fail_next(sid, WriteFailedError("disk went away"))
    with pytest.raises(WriteFailedError):
        await writer.append(b"b")
    after = await writer.append(b"c")
    assert after.base_offset == 1  # nothing of the failed append was acknowledged
    assert after.segment_id != sid
    closed = writer.records[0].info
    assert (closed.state, closed.end_offset, closed.entries) == (SegmentState.CLOSED, 1, 1)


async def _one_entry_then_one_held(
    segments: Segments,
) -> tuple[SegmentWriter, asyncio.Future[Entry]]:
    """A writer that stored ``a``, and its append of ``b`` held by the storage."""
    writer = await _writer(MemoryMetadataStore(), segments.storage)
    await writer.append(b"a")
    segments.hold = True
    first = asyncio.ensure_future(writer.append(b"b"))
    while segments.held < 1:
        await asyncio.sleep(0)
    return writer, first


async def test_an_append_made_before_a_failure_reached_a_caller_fails_with_it(
    segments: Segments,
) -> None:
    """A failed segment's appends are retried by their producers; an append that comes
    after the failure but before any caller heard of it, or that waited behind the failed
    ones, would be stored ahead of those retries (and stored twice once its producer, told
    of the failure, resends it): it fails too. The next one starts a new segment."""
    writer, first = await _one_entry_then_one_held(segments)
    segments.hold = False
    segments.fail_held(WriteFailedError("disk went away"))
    while writer.healthy:  # the writer has the failure; the caller of "b" not yet
        await asyncio.sleep(0)
    assert not first.done()
    with pytest.raises(WriteFailedError):
        await writer.append(b"c")
    with pytest.raises(WriteFailedError):
        await first
    after = await writer.append(b"d")
    assert after.base_offset == 1 and after.segment_id != writer.records[0].info.segment_id
    stored = []
    for record in writer.records:
        stored += [e.payload for e in (await segments.stored(record.info.segment_id)).values()]
    assert stored == [b"a", b"d"]  # nothing of "b" or "c" (a failed segment ends at lac)


async def test_an_append_waiting_behind_a_failed_one_fails_with_it(segments: Segments) -> None:
    writer, first = await _one_entry_then_one_held(segments)
    roll = asyncio.ensure_future(writer.roll())  # holds the lock until "b" has ended
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(writer.append(b"c"))  # queued behind the roll
    await asyncio.sleep(0)
    segments.hold = False
    segments.fail_held(WriteFailedError("disk went away"))
    with pytest.raises(WriteFailedError):
        await first
    await roll
    with pytest.raises(WriteFailedError):
        await waiting
    after = await writer.append(b"d")
    assert after.base_offset == 1


async def test_a_new_writer_fences_and_recovers_the_open_segment_and_the_old_one_stops(
    segments: Segments,
) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    old = await _writer(meta, storage)
    for _ in range(4):
        await old.append(b"z", count=3)
    # the old writer is thought dead: a new one opens the partition
    new = await _writer(meta, storage)
    recovered = new.records[0].info
    assert (recovered.state, recovered.end_offset, recovered.entries) == (
        SegmentState.CLOSED,
        12,
        4,
    )
    assert segments.fenced(recovered.segment_id)
    assert new.recovered == 1
    # the old writer's next append is refused by storage: nothing more is acknowledged
    with pytest.raises(FencedError):
        await old.append(b"late")
    with pytest.raises(FencedError):  # and it never opens a segment behind the new writer
        await old.append(b"later")
    entry = await new.append(b"new")
    assert entry.base_offset == 12
    assert [row["state"] for row in await _listed(meta)] == ["CLOSED", "OPEN"]


async def test_a_writer_that_lost_the_segment_list_is_fenced_at_its_next_list_write(
    segments: Segments,
) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    old = await _writer(meta, storage, max_entries=2)
    await old.append(b"1")
    path = segment_list_path(NAME)
    node = await meta.get(path)
    assert node is not None
    await meta.put(path, node.value, expected_version=node.stat.version)  # another writer
    await old.append(b"2")  # storage took it; the roll that follows must write the list
    with pytest.raises(FencedError, match="another writer"):
        await old.append(b"3")
    assert old.fenced is not None
    with pytest.raises(FencedError):
        await old.append(b"4")
    assert [row["state"] for row in await _listed(meta)] == ["OPEN"]


async def test_unload_closes_the_open_segment_release_leaves_it_for_recovery(
    segments: Segments,
) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    await writer.append(b"a")
    await writer.unload()
    assert [row["state"] for row in await _listed(meta)] == ["CLOSED"]
    with pytest.raises(FencedError):
        await writer.append(b"b")
    again = await _writer(meta, storage)
    assert again.recovered == 0 and again.end == 1
    await again.append(b"c")
    again.release()
    assert [row["state"] for row in await _listed(meta)] == ["CLOSED", "OPEN"]
    third = await _writer(meta, storage)
    assert third.recovered == 1 and third.end == 2


async def test_trim_drops_a_prefix_of_closed_segments_from_the_list(segments: Segments) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage, max_entries=2)
    for _ in range(6):
        await writer.append(b"t")
    doomed = await writer.trim(4)
    assert [r.info.end_offset for r in doomed] == [2, 4]
    assert writer.start == 4
    node = await meta.get(segment_list_path(NAME))
    assert node is not None and json.loads(node.value)["start"] == 4
    reopened = await _writer(meta, storage)
    assert reopened.start == 4 and [r.info.first_offset for r in reopened.records][:1] == [4]


async def test_changes_to_an_open_segment_record_are_refused(segments: Segments) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    await writer.append(b"o")
    with pytest.raises(StorageError, match="still open"):
        await writer.update_segment(writer.records[-1].info.segment_id, local=False)


async def test_a_caller_that_goes_away_does_not_cut_its_append_short(segments: Segments) -> None:
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    segments.hold = True
    first = asyncio.ensure_future(writer.append(b"1"))
    second = asyncio.ensure_future(writer.append(b"2"))
    while segments.held < 2:
        await asyncio.sleep(0)
    first.cancel()  # its producer's connection closed, say
    segments.release_appends()
    assert (await second).base_offset == 1
    with pytest.raises(asyncio.CancelledError):
        await first
    info = writer.records[-1].info
    assert (info.end_offset, info.entries) == (2, 2) and writer.healthy


async def test_appends_in_flight_count_toward_the_size_limit(segments: Segments) -> None:
    """A burst handed to storage before any acknowledgement still rolls at the limit: the
    segment grows at most one entry past it."""
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage, max_bytes=100)  # an entry is 40 + 20 bytes
    segments.hold = True
    burst = [asyncio.ensure_future(writer.append(bytes(20))) for _ in range(5)]
    while not all(a.done() for a in burst):
        segments.release_appends()
        await asyncio.sleep(0)
    assert [e.base_offset for e in await asyncio.gather(*burst)] == [0, 1, 2, 3, 4]
    assert [r.info.entries for r in writer.records] == [2, 2, 1]


async def test_an_append_never_passes_appends_queued_for_the_lock(segments: Segments) -> None:
    """Appends waiting behind a roll or a list change keep their place: one that arrives
    once the lock is free, before they ran, is numbered after them."""
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage)
    await writer.append(b"0")  # the segment is open: later appends need no lock to start
    async with writer.lock:  # a roll, say
        queued = [asyncio.ensure_future(writer.append(b"%d" % i)) for i in (1, 2)]
        await asyncio.sleep(0)  # each runs up to the lock and waits there
        assert not any(a.done() for a in queued)
    late = await writer.append(b"3")  # the lock is free, but two appends wait for it
    assert [(await a).base_offset for a in queued] == [1, 2] and late.base_offset == 3
    stored = await segments.stored(writer.records[-1].info.segment_id)
    assert [stored[eid].payload for eid in sorted(stored)] == [b"0", b"1", b"2", b"3"]


async def test_a_released_partitions_records_are_read_from_the_store_as_its_next_owner_writes(
    segments: Segments,
) -> None:
    """After ``release`` this process no longer holds the list; ``recorded_segment`` reads
    a segment's record as the next owner left it (None once it is not listed)."""
    meta, storage = MemoryMetadataStore(), segments.storage
    writer = await _writer(meta, storage, max_entries=2)
    for _ in range(3):
        await writer.append(b"r")
    writer.release()
    owner = await _writer(meta, storage, max_entries=2)
    first = owner.records[0].info.segment_id
    await owner.update_segment(first, offload={"attempts": ["theirs"]})
    got = await recorded_segment(meta, NAME, first)
    assert got is not None and got.state is SegmentState.CLOSED
    assert got.offload == {"attempts": ["theirs"]}
    await owner.trim(2)
    assert await recorded_segment(meta, NAME, first) is None
    assert await recorded_segment(meta, "public/default/never", first) is None
