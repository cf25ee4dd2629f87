"""Offload through the managed ledger, in process: what reads, ids, time lookups, the
Parquet layout and retention look like once segments live in the object store."""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from magnetar.core import formats
from magnetar.core.entries import Entry
from magnetar.ledger import LedgerFactory
from magnetar.ledger.errors import SegmentNotOffloadableError
from magnetar.storage import OffsetOutOfRangeError, SegmentInfo, SegmentState
from magnetar.storage.partition import PartitionLog
from magnetar.testing.faults import FaultyObjectStore
from magnetar.tier import (
    LocalObjectStore,
    Offloader,
    OffloadVerificationError,
    UnsupportedEntryFormatError,
    key_of,
    manifest_key,
)
from magnetar.tier.offloader import _dictionary_columns
from magnetar.tier.parquet import entries_to_table, entry_boundaries
from tests.tier.rig import (
    PARTITION,
    OpenRig,
    Rig,
    append_mixed,
    batch_size,
    expected_messages,
    messages,
    publish_time,
    pulsar_entry,
    read_all,
    reopen,
)

DESIGN_COLUMNS = [  # DESIGN.md decision 4, in this order
    "offset",
    "publish_time",
    "event_time",
    "key",
    "value",
    "properties",
    "producer_name",
    "sequence_id",
    "schema_version",
]


async def offload_all(rig: Rig, *, drop: bool = True) -> list[int]:
    """Offload every CLOSED segment (and drop its local copy); their ids."""
    ids = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    for sid in ids:
        await rig.ledger.offload(sid)
        if drop:
            await rig.ledger.drop_local_copy(sid)
    return ids


async def test_every_message_reads_back_identically_from_offloaded_segments(
    open_rig: OpenRig,
) -> None:
    """Batched and single messages keep value, key, properties, event time, producer and
    sequence id; entries keep offsets, counts, publish times and segment ids."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    local = await read_all(rig.ledger)
    ids = await offload_all(rig)
    assert len(ids) == 4
    rig = await reopen(rig, open_rig)
    # the segment open at the stop was closed at the restart, a new one opened (as Pulsar
    # closes a ledger): both local
    assert [s.local for s in rig.ledger.segments()] == [False] * 4 + [True, True]
    remote = await read_all(rig.ledger)
    shape = [(e.base_offset, e.count, e.publish_time, e.segment_id, e.format) for e in local]
    assert [
        (e.base_offset, e.count, e.publish_time, e.segment_id, e.format) for e in remote
    ] == shape
    assert messages(remote) == messages(local) == expected_messages(23)
    assert [rig.ledger.message_id(e) for e in remote] == [rig.ledger.message_id(e) for e in local]


async def test_a_read_may_start_anywhere_inside_an_offloaded_segment(open_rig: OpenRig) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 16)
    everything = messages(await read_all(rig.ledger))
    await offload_all(rig)
    rig = await reopen(rig, open_rig)
    for offset in range(rig.ledger.end_offset):
        [entry] = await rig.ledger.read(offset, max_entries=1)
        assert entry.base_offset <= offset < entry.next_offset  # the entry holding it
        assert messages(await read_all(rig.ledger, offset))[-1] == everything[-1]


async def test_seek_by_time_finds_messages_in_offloaded_segments(open_rig: OpenRig) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    entries = await read_all(rig.ledger)
    await offload_all(rig)
    rig = await reopen(rig, open_rig)
    for i, entry in enumerate(entries):
        assert await rig.ledger.find_offset(publish_time(i)) == entry.base_offset
        assert await rig.ledger.find_offset(publish_time(i) - 500) == entry.base_offset
    assert await rig.ledger.find_offset(0) == 0
    assert await rig.ledger.find_offset(publish_time(99)) == rig.ledger.end_offset


async def test_message_ids_of_offloaded_segments_map_to_the_same_offsets(
    open_rig: OpenRig,
) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 12)
    before = {e.base_offset: rig.ledger.message_id(e, 0) for e in await read_all(rig.ledger)}
    await offload_all(rig)
    rig = await reopen(rig, open_rig)
    for offset, mid in before.items():
        assert rig.ledger.offset_of(mid) == offset
        [entry] = await rig.ledger.read(offset, max_entries=1)
        assert rig.ledger.message_id(entry, 0) == mid


async def test_the_parquet_object_has_the_design_columns_in_offset_order(
    open_rig: OpenRig, tmp_path: Path
) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 11)
    [first, second] = await offload_all(rig, drop=False)
    segment = rig.segment(second)
    path = tmp_path / "tier" / key_of(rig.ledger.name, rig.segment(second))
    table = pq.read_table(path)  # plain pyarrow, straight from the file
    assert table.column_names[: len(DESIGN_COLUMNS)] == DESIGN_COLUMNS
    offsets = table.column("offset").to_pylist()
    assert offsets == list(range(segment.first_offset, segment.end_offset))
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.row_group(0).sorting_columns[0].column_index == 0
    rows = table.to_pylist()
    assert {r["producer_name"] for r in rows} == {"producer-a", "producer-b"}
    assert all(r["publish_time"].tzinfo is not None for r in rows)
    by_offset = dict(expected_messages(11))
    event_micros = table.column("event_time").cast(pa.int64()).to_pylist()
    for r, event in zip(rows, event_micros, strict=True):
        want = by_offset[r["offset"]]
        assert (r["value"], r["key"], dict(r["properties"]), event) == (
            want.value,
            want.key,
            want.properties,
            want.event_time * 1000,
        )
    manifest = json.loads(
        (tmp_path / "tier" / manifest_key(key_of(rig.ledger.name, segment))).read_bytes()
    )
    assert manifest["row_count"] == len(rows) == parquet.metadata.num_rows
    assert manifest["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert rig.segment(second).offload["sha256"] == manifest["sha256"]  # type: ignore[index]
    assert first < second


async def test_row_groups_never_split_an_entry(open_rig: OpenRig, tmp_path: Path) -> None:
    rig = await open_rig(row_group_rows=2)
    await append_mixed(rig.ledger, 11)
    for sid in await offload_all(rig, drop=False):
        parquet = pq.ParquetFile(tmp_path / "tier" / key_of(rig.ledger.name, rig.segment(sid)))
        assert parquet.metadata.num_row_groups > 1
        for g in range(parquet.metadata.num_row_groups):
            group = parquet.read_row_group(g, columns=["offset", "entry_offset"])
            assert group.column("offset")[0] == group.column("entry_offset")[0]


async def test_only_a_closed_local_segment_can_be_offloaded(open_rig: OpenRig) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 7)
    [closed] = rig.in_state(SegmentState.CLOSED)
    [open_segment] = rig.in_state(SegmentState.OPEN)
    with pytest.raises(SegmentNotOffloadableError, match="OPEN"):
        await rig.ledger.offload(open_segment.segment_id)
    with pytest.raises(SegmentNotOffloadableError, match="does not exist"):
        await rig.ledger.offload(999)
    assert rig.tier.store.list() == []
    first, second = await asyncio.gather(
        rig.ledger.offload(closed.segment_id),
        rig.ledger.offload(closed.segment_id),
        return_exceptions=True,
    )
    assert first.state is SegmentState.OFFLOADED  # type: ignore[union-attr]
    assert isinstance(second, SegmentNotOffloadableError) and "being offloaded" in str(second)
    await rig.ledger.drop_local_copy(closed.segment_id)
    with pytest.raises(SegmentNotOffloadableError, match="OFFLOADED, remote"):
        await rig.ledger.offload(closed.segment_id)
    after = rig.segment(closed.segment_id)
    assert (after.state, after.local) == (SegmentState.OFFLOADED, False)
    assert messages(await read_all(rig.ledger)) == expected_messages(7)


@pytest.mark.parametrize(("fmt", "count"), [(0, 3), (77, 1)], ids=["raw-count-3", "unknown"])
async def test_entries_that_cannot_become_one_row_per_message_stay_local(
    open_rig: OpenRig, fmt: int, count: int
) -> None:
    """A RAW entry claiming 3 messages, or a format nobody can unpack, would lose offsets."""
    rig = await open_rig()
    for i in range(6):
        await rig.ledger.append(f"opaque-{i}".encode(), count=count, fmt=fmt)
    [closed] = rig.in_state(SegmentState.CLOSED)
    with pytest.raises(UnsupportedEntryFormatError, match="offset 0"):
        await rig.ledger.offload(closed.segment_id)
    after = rig.segment(closed.segment_id)
    assert (after.state, after.local, after.offload) == (SegmentState.CLOSED, True, None)
    assert [e.payload for e in await read_all(rig.ledger)] == [
        f"opaque-{i}".encode() for i in range(6)
    ]


async def test_retention_deletes_offloaded_objects_with_their_segments(open_rig: OpenRig) -> None:
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    ids = await offload_all(rig)
    keep = rig.segment(ids[2])
    keys = [key_of(rig.ledger.name, rig.segment(sid)) for sid in ids]
    deleted = await rig.ledger.trim(keep.first_offset)
    assert [s.segment_id for s in deleted] == ids[:2]
    for key in keys[:2]:
        assert not rig.tier.store.exists(key)
    assert rig.tier.store.exists(keys[2])
    assert rig.ledger.start_offset == keep.first_offset
    with pytest.raises(OffsetOutOfRangeError):
        await rig.ledger.read(0)
    remaining = messages(await read_all(rig.ledger, keep.first_offset))
    assert remaining == [m for m in expected_messages(23) if m[0] >= keep.first_offset]


async def test_a_trim_never_removes_an_offloading_segment_nor_what_follows(
    open_rig: OpenRig, tmp_path: Path
) -> None:
    """Retention may only cut a prefix: with segment 2 being offloaded, trimming up to the
    end deletes segment 1 alone, so the log keeps no hole."""
    store = FaultyObjectStore(LocalObjectStore(tmp_path / "tier"))
    rig = await open_rig(store)
    await append_mixed(rig.ledger, 23)
    first, second, *_ = [s.segment_id for s in rig.in_state(SegmentState.CLOSED)]
    gate = store.block("put")
    offload = asyncio.create_task(rig.ledger.offload(second))
    assert await asyncio.to_thread(gate.reached.wait, 30)
    assert rig.segment(second).state is SegmentState.OFFLOADING
    deleted = await rig.ledger.trim(rig.ledger.end_offset)
    assert [s.segment_id for s in deleted] == [first]
    gate.release()
    assert (await offload).state is SegmentState.OFFLOADED
    start = rig.segment(second).first_offset
    assert rig.ledger.start_offset == start
    assert messages(await read_all(rig.ledger, start)) == expected_messages(23)[start:]


async def test_a_read_in_flight_when_retention_deletes_its_object_gets_out_of_range(
    open_rig: OpenRig, tmp_path: Path
) -> None:
    store = FaultyObjectStore(LocalObjectStore(tmp_path / "tier"))
    rig = await open_rig(store)
    await append_mixed(rig.ledger, 12)
    ids = await offload_all(rig)
    rig = await reopen(rig, open_rig)  # cold reader caches
    first_key = key_of(rig.ledger.name, rig.segment(ids[0]))
    gate = store.block("open")
    read = asyncio.create_task(rig.ledger.read(1))  # positioned in the first segment
    assert await asyncio.to_thread(gate.reached.wait, 30)
    deleted = await rig.ledger.trim(rig.segment(ids[1]).first_offset)
    assert [s.segment_id for s in deleted] == [ids[0]]
    gate.release()
    with pytest.raises(OffsetOutOfRangeError, match="deleted by retention"):
        await read
    assert not store.exists(first_key)
    with pytest.raises(OffsetOutOfRangeError):
        await rig.ledger.read(1)


async def test_a_read_racing_the_local_copy_drop_is_served_by_the_tier(
    open_rig: OpenRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader thread is inside a segment when its files are deleted: the read goes
    on from the object store instead of failing on the missing file."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 12)
    [sid, *_] = await offload_all(rig, drop=False)
    reading, dropped = threading.Event(), threading.Event()
    original = PartitionLog.read_ledger

    def read_after_drop(self: PartitionLog, *args: Any) -> list[Entry]:
        if args[-1] == sid and not dropped.is_set():  # the ledger id: the segment's
            reading.set()
            assert dropped.wait(30)
        return original(self, *args)

    monkeypatch.setattr(PartitionLog, "read_ledger", read_after_drop)
    read = asyncio.create_task(rig.ledger.read(0, max_entries=2))
    assert await asyncio.to_thread(reading.wait, 30)
    await rig.ledger.drop_local_copy(sid)
    dropped.set()
    entries = await read
    assert [e.segment_id for e in entries] == [sid, sid]
    assert messages(entries) == expected_messages(12)[: sum(e.count for e in entries)]


async def test_the_offloader_refuses_entries_that_do_not_cover_the_segment(
    open_rig: OpenRig,
) -> None:
    """Verification covers the segment, not just the object: an object missing the last
    entry would read back 'correct' and lose it once the local copy goes."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 7)
    [seg] = rig.in_state(SegmentState.CLOSED)
    entries = await read_all(rig.ledger)
    own = [e for e in entries if e.segment_id == seg.segment_id]
    for partial in (own[:-1], own[1:]):
        with pytest.raises(OffloadVerificationError, match="were read from it"):
            rig.tier.offloader.offload(rig.ledger.name, seg, partial, "attempt-1")
    assert rig.tier.store.list() == []
    manifest = rig.tier.offloader.offload(rig.ledger.name, seg, own, "attempt-2")
    assert manifest.row_count == seg.end_offset - seg.first_offset


async def test_a_ledger_reopened_while_its_offload_runs_leaves_that_offload_be(
    open_rig: OpenRig,
) -> None:
    """A bundle unloaded and loaded again in the same process while the offload service still
    offloads one of its segments: the new ledger must neither revert that segment to CLOSED
    nor delete the objects its attempt wrote, or the offload, ending after, would mark the
    segment OFFLOADED over deleted objects and the messages would be lost with the local
    copy. It ends OFFLOADED, every message read back from the object store."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    local = await read_all(rig.ledger)
    factory = LedgerFactory(rig.engine, rig.tier)
    first = await factory.open(PARTITION)
    sid = rig.in_state(SegmentState.CLOSED)[0].segment_id
    written, go_on = threading.Event(), threading.Event()
    offload_table = rig.tier.offloader.offload_table

    def uploaded_then_wait(*args: Any) -> Any:
        out = offload_table(*args)  # objects written and verified...
        written.set()
        go_on.wait(30)  # ...and the segment's record not yet OFFLOADED
        return out

    rig.tier.offloader.offload_table = uploaded_then_wait  # type: ignore[method-assign]
    offloading = asyncio.create_task(first.offload(sid))
    try:
        assert await asyncio.to_thread(written.wait, 30)
        await rig.engine.unload(PARTITION)  # the bundle handed over...
        again = await factory.open(PARTITION)  # ...and loaded here again
        assert next(s for s in again.segments() if s.segment_id == sid).state is (
            SegmentState.OFFLOADING
        )
    finally:
        go_on.set()
        info = await offloading
    assert info.state is SegmentState.OFFLOADED
    await again.drop_local_copy(sid)
    assert not next(s for s in again.segments() if s.segment_id == sid).local
    assert messages(await read_all(again)) == messages(local) == expected_messages(23)


def blocked_after_upload(rig: Rig) -> tuple[threading.Event, threading.Event]:
    """Make the rig's uploads stop once their objects are written and verified (the
    segment's record not yet OFFLOADED) until the second event is set; the first tells
    an upload got there."""
    written, go_on = threading.Event(), threading.Event()
    offload_table = rig.tier.offloader.offload_table

    def uploaded_then_wait(*args: Any) -> Any:
        out = offload_table(*args)
        written.set()
        go_on.wait(30)
        return out

    rig.tier.offloader.offload_table = uploaded_then_wait  # type: ignore[method-assign]
    return written, go_on


async def test_an_offload_outlived_by_two_handovers_leaves_the_new_owners_record_be(
    open_rig: OpenRig,
) -> None:
    """Broker A offloads a segment; its bundle goes to broker B (which reverts the cut
    offload and deletes its objects) and comes back to A, all while A's first offload still
    runs. When that offload ends it must not mark the segment OFFLOADED: its objects are
    gone. The record's owner refuses the change (it is no longer that attempt's), the
    attempt drops what it wrote, and the segment stays CLOSED and local, then offloads
    afresh; every message reads back from the object store."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    local = await read_all(rig.ledger)
    broker_a, broker_b = LedgerFactory(rig.engine, rig.tier), LedgerFactory(rig.engine, rig.tier)
    first = await broker_a.open(PARTITION)
    sid = rig.in_state(SegmentState.CLOSED)[0].segment_id
    written, go_on = blocked_after_upload(rig)
    offloading = asyncio.create_task(first.offload(sid))
    try:
        assert await asyncio.to_thread(written.wait, 30)
        await rig.engine.unload(PARTITION)  # A hands the bundle over without waiting
        on_b = await broker_b.open(PARTITION)
        await on_b.settled()  # B settles A's attempt
        reverted = next(s for s in on_b.segments() if s.segment_id == sid)
        assert reverted.state is SegmentState.CLOSED and "attempts" not in (reverted.offload or {})
        await rig.engine.unload(PARTITION)  # and it comes back to A
        again = await broker_a.open(PARTITION)
        await again.settled()
    finally:
        go_on.set()
        with pytest.raises(SegmentNotOffloadableError, match="changed meanwhile"):
            await offloading
    info = next(s for s in again.segments() if s.segment_id == sid)
    assert info.state is SegmentState.CLOSED and info.local
    assert rig.tier.store.list() == []  # the superseded attempt's objects are gone too
    rig.tier.offloader.offload_table = type(rig.tier.offloader).offload_table.__get__(  # type: ignore[method-assign]
        rig.tier.offloader
    )
    assert (await again.offload(sid)).state is SegmentState.OFFLOADED
    await again.drop_local_copy(sid)
    assert messages(await read_all(again)) == messages(local) == expected_messages(23)


async def test_unloading_a_ledger_cancels_its_offload_and_puts_the_segment_back(
    open_rig: OpenRig,
) -> None:
    """A graceful unload does not leave an offload running under the next owner: it cancels
    it and waits for it (the upload thread included), so the segment is CLOSED with no
    object left behind before the bundle is released."""
    rig = await open_rig()
    await append_mixed(rig.ledger, 23)
    sid = rig.in_state(SegmentState.CLOSED)[0].segment_id
    written, go_on = blocked_after_upload(rig)
    offloading = asyncio.create_task(rig.ledger.offload(sid))
    assert await asyncio.to_thread(written.wait, 30)
    threading.Timer(0.2, go_on.set).start()  # the upload ends after the cancel
    await rig.ledger.unload()
    assert offloading.cancelled()
    reopened = await LedgerFactory(rig.engine, rig.tier).open(PARTITION)
    info = next(s for s in reopened.segments() if s.segment_id == sid)
    assert info.state is SegmentState.CLOSED and info.local
    assert rig.tier.store.list() == []


def test_a_segment_offloaded_in_pieces_is_the_file_one_pass_would_write(tmp_path: Path) -> None:
    """The offloader unpacks a segment in chunks of pieces and writes each piece on another
    thread while the next is read: more entries than one chunk holds (mixed single messages
    and batches) give exactly the rows of unpacking them all at once, in row groups cut where
    ``entry_boundaries`` cuts the whole segment's rows."""
    entries, offset = [], 0
    for i in range(700):  # beyond one chunk of entries
        size = batch_size(i)
        count = max(size, 1)
        entries.append(
            Entry(offset, count, publish_time(i), -1, formats.PULSAR, pulsar_entry(i, size))
        )
        offset += count
    info = SegmentInfo(
        7,
        0,
        SegmentState.CLOSED,
        0,
        offset,
        entries=len(entries),
        first_publish_time=publish_time(0),
        max_publish_time=publish_time(699),
    )
    offloader = Offloader(LocalObjectStore(tmp_path / "tier"), row_group_rows=10)
    manifest = offloader.offload(PARTITION, info, entries, "attempt-1")
    whole = entries_to_table(entries)
    written = pq.ParquetFile(tmp_path / "tier" / manifest.object_key)
    assert written.read().equals(whole)
    cuts = [*entry_boundaries(whole, 10), whole.num_rows]
    sizes = [written.metadata.row_group(g).num_rows for g in range(written.metadata.num_row_groups)]
    assert sizes == [end - start for start, end in itertools.pairwise(cuts)]


def test_only_columns_whose_values_repeat_get_a_dictionary(tmp_path: Path) -> None:
    """A dictionary is tried only where the first rows repeat their values (the producer,
    the entry's offset and publish time): a column of distinct values (here the offsets,
    the values and the keys) is written plain, not hashed into a dictionary first."""
    entries, offset = [], 0
    for i in range(300):
        entries.append(Entry(offset, 10, publish_time(i), -1, formats.PULSAR, pulsar_entry(i, 10)))
        offset += 10
    info = SegmentInfo(7, 0, SegmentState.CLOSED, 0, offset, entries=len(entries))
    manifest = Offloader(LocalObjectStore(tmp_path / "tier")).offload(
        PARTITION, info, entries, "attempt-1"
    )
    chunks = pq.ParquetFile(tmp_path / "tier" / manifest.object_key).metadata.row_group(0)
    dictionary = {
        chunks.column(c).path_in_schema: chunks.column(c).has_dictionary_page
        for c in range(chunks.num_columns)
    }
    assert dictionary["producer_name"] and dictionary["entry_offset"]
    assert dictionary["publish_time"] and dictionary["properties.key_value.key"]
    assert not dictionary["offset"] and not dictionary["value"] and not dictionary["key"]


def test_the_dictionary_choice_walks_every_column_type_parquet_writes() -> None:
    """Nested and unusual columns (lists of every kind, structs, maps, dictionaries, all
    nulls) get a path Parquet accepts, decided on their leaves; none fails the offload."""
    repeated = ["a", "a", "a", "b"]
    table = pa.table(
        {
            "nulls": pa.nulls(4),
            "large": pa.array([[1], [1], [1], [2]], pa.large_list(pa.int64())),
            "fixed": pa.array([[1, 2]] * 4, pa.list_(pa.int64(), 2)),
            "coded": pa.array(repeated).dictionary_encode(),
            "nested": pa.array([{"a": i, "b": "x"} for i in range(4)]),
            "map": pa.array([[("k", str(i))] for i in range(4)], pa.map_(pa.string(), pa.string())),
            "distinct": pa.array(["a", "b", "c", "d"]),
        }
    )
    chosen = _dictionary_columns(table)
    assert chosen == [
        "nulls",
        "large.list.element",
        "fixed.list.element",
        "coded",
        "nested.b",
        "map.key_value.key",
        "map.key_value.value",
    ]
    pq.write_table(table, io.BytesIO(), use_dictionary=chosen)
