"""Offloaded segments become rows of the topic's Iceberg table: typed by the topic's JSON
schema, one append snapshot per segment naming its offsets, removed by retention, widened
by schema evolution; consumers still read the offloaded history byte for byte."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from magnetar.core import formats
from magnetar.ledger import LedgerFactory, ManagedLedger
from magnetar.ledger.errors import SegmentNotOffloadableError
from magnetar.storage import SegmentState
from magnetar.tier import (
    IcebergCommitError,
    IcebergTables,
    LocalObjectStore,
    ObjectStoreUnavailableError,
    S3ObjectStore,
    SegmentFiles,
    ValueSchema,
)
from magnetar.tier.iceberg.columns import table_schema
from tests.iceberg.conftest import OpenIcebergRig
from tests.iceberg.rig import (
    EVENT_V1,
    ORDER_V1,
    ORDER_V2,
    IcebergRig,
    append_orders,
    avro,
    data_files,
    event,
    json_entry,
    order,
    read_table,
    schema,
)
from tests.tier.conftest import make_bucket
from tests.tier.rig import messages, read_all


async def offload_closed(rig, value_schema=None) -> list[int]:  # type: ignore[no-untyped-def]
    done = []
    for seg in rig.closed():
        await rig.ledger.offload(seg.segment_id, value_schema=value_schema)
        done.append(seg.segment_id)
    return done


async def test_offloaded_segments_are_typed_rows_of_the_topic_table(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 40, batch=3)  # 14 entries: two closed segments of 5
    before = messages(await read_all(rig.ledger))
    segments = await offload_closed(rig, schema(ORDER_V1))
    assert len(segments) == 2

    rows = read_table(rig.tables)
    offloaded = sum(
        s.end_offset - s.first_offset
        for s in rig.ledger.segments()
        if s.state is SegmentState.OFFLOADED
    )
    assert rows.column("__offset").to_pylist() == list(range(offloaded))  # once each, contiguous
    assert set(rows.column("__partition").to_pylist()) == {0}
    assert rows.select(["id", "item", "ship"]).to_pylist() == [
        {k: v for k, v in order(i).items()} for i in range(offloaded)
    ]
    assert rows.column("__key").to_pylist() == [f"k{i}" for i in range(offloaded)]
    assert "value" not in rows.column_names  # typed columns instead of bytes
    table = rig.tables.catalog.load_table("public.default.orders")
    assert [str(f) for f in table.spec().fields] == ["1000: __publish_time_day: day(3)"]
    summaries = [json.loads(s.summary["magnetar.segments"]) for s in table.snapshots()]
    assert [(s[0]["segment"], s[0]["firstOffset"], s[0]["lastOffset"]) for s in summaries] == [
        (s.segment_id, s.first_offset, s.last_offset)
        for s in rig.ledger.segments()
        if s.state is SegmentState.OFFLOADED
    ]
    for seg in rig.ledger.segments()[:2]:
        assert seg.offload is not None and seg.offload["iceberg"]["committed"] is True
        await rig.ledger.drop_local_copy(seg.segment_id)
    assert messages(await read_all(rig.ledger)) == before  # the tier's history unchanged

    frame = pl.scan_iceberg(table).select("__offset", "id").sort("__offset").collect()
    assert frame["__offset"].to_list() == list(range(offloaded))
    assert frame["id"].to_list() == list(range(offloaded))


async def test_a_topic_without_schema_keeps_binary_values(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    await offload_closed(rig)
    rows = read_table(rig.tables)
    assert rows.column("value").to_pylist() == [
        json.dumps(order(i)).encode() for i in range(rows.num_rows)
    ]


async def test_schema_evolution_adds_an_optional_column(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 18, batch=3)  # segment 1 closed: orders 0-14
    assert await offload_closed(rig, schema(ORDER_V1))
    await append_orders(rig.ledger, 18, 30, batch=3, note=True, version=1)
    await offload_closed(rig, schema(ORDER_V1, ORDER_V2))
    rows = read_table(rig.tables)
    table = rig.tables.catalog.load_table("public.default.orders")
    assert [f.name for f in table.schema().fields][-1] == "note"
    assert len(table.schemas()) == 2
    notes = rows.column("note").to_pylist()
    assert notes[:18] == [None] * 18
    assert notes[18:] == [f"note-{i}" for i in range(18, rows.num_rows)]
    assert rows.column("__offset").to_pylist() == list(range(rows.num_rows))


async def test_retention_removes_trimmed_segments_from_the_table(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 45, batch=3)  # three closed segments
    await offload_closed(rig, schema(ORDER_V1))
    first, second = rig.ledger.segments()[:2]
    files_before = data_files(rig.tables)
    await rig.ledger.trim(first.end_offset)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist()[0] == second.first_offset
    left = data_files(rig.tables)
    assert len(left) == len(files_before) - 1
    for uri in left:  # every file the table references is there
        assert Path(uri.removeprefix("file://")).exists()
    table = rig.tables.catalog.load_table("public.default.orders")
    snap = table.current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary["magnetar.operation"] == "retention"
    assert json.loads(snap.summary["magnetar.segments"])[0]["segment"] == first.segment_id


async def test_segments_spanning_days_get_a_file_per_day(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await open_iceberg_rig()
    day = 86_400_000
    await append_orders(rig.ledger, 0, 2, batch=1, publish_time=1_700_000_000_000)
    await append_orders(rig.ledger, 2, 4, batch=1, publish_time=1_700_000_000_000 + day)
    await offload_closed(rig)
    assert len(data_files(rig.tables)) == 2
    table = rig.tables.catalog.load_table("public.default.orders")
    got = table.scan(row_filter="__offset >= 2").to_arrow()
    assert sorted(got.column("__offset").to_pylist()) == [2, 3, 4]


async def test_a_commit_whose_answer_was_lost_is_not_added_twice(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit happened but the offload failed after it: the table drops the files
    again before the attempt's objects go, and the retry adds them once."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    real = rig.tables.commit

    def commit_then_fail(files):  # type: ignore[no-untyped-def]
        real(files)
        raise OSError("connection reset after the commit")

    monkeypatch.setattr(rig.tables, "commit", commit_then_fail)
    with pytest.raises(OSError):
        await rig.ledger.offload(seg.segment_id)
    assert rig.ledger.segments()[0].state is SegmentState.CLOSED
    assert data_files(rig.tables) == []
    monkeypatch.setattr(rig.tables, "commit", real)
    await rig.ledger.offload(seg.segment_id)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_a_table_that_cannot_be_made_fails_the_offload_after_its_upload_ends(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is made (or widened) while the data files are written: when that fails
    first, the offload still waits for the upload to end, then leaves the segment CLOSED
    with none of the attempt's objects behind; the next offload commits it once."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    real = rig.tables.ensure_table
    uploads: list[str] = []
    real_put = rig.tier.store.put

    def put(key: str, data: bytes) -> None:
        uploads.append(key)
        real_put(key, data)

    def catalog_down(*args: Any) -> Any:
        raise IcebergCommitError("the catalog cannot be reached")

    monkeypatch.setattr(rig.tier.store, "put", put)
    monkeypatch.setattr(rig.tables, "ensure_table", catalog_down)
    with pytest.raises(IcebergCommitError):
        await rig.ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
    ours = f"{seg.segment_id:020d}/"
    assert any(ours in k for k in uploads)  # the upload ran to its end before the cleanup
    assert rig.ledger.segments()[0].state is SegmentState.CLOSED
    assert [k for k in rig.tier.store.list() if ours in k] == []
    monkeypatch.setattr(rig.tables, "ensure_table", real)
    await rig.ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_the_table_lives_in_an_s3_warehouse(
    open_iceberg_rig: OpenIcebergRig, s3_endpoint: str
) -> None:
    store = S3ObjectStore(make_bucket(s3_endpoint), "magnetar/tier", endpoint=s3_endpoint)
    rig = await open_iceberg_rig(store)
    await append_orders(rig.ledger, 0, 20, batch=2)
    await offload_closed(rig, schema(ORDER_V1))
    rows = read_table(rig.tables)
    assert rows.column("id").to_pylist() == list(range(rows.num_rows))
    assert all(f.startswith(f"{store.url}/") for f in data_files(rig.tables))
    assert rig.tables.catalog.load_table("public.default.orders").location() == (
        f"{store.url}/iceberg/public/default/orders"
    )


def test_the_local_warehouse_is_the_tier_directory(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "tier")
    from magnetar.tier import IcebergTables

    tables = IcebergTables.open(store, "sqlite", f"sqlite:///{tmp_path / 'iceberg.db'}")
    props = tables.catalog_properties()
    assert props["warehouse"] == f"file://{tmp_path / 'tier'}/iceberg"
    assert props["type"] == "sql"


async def test_maintenance_expires_old_snapshots_but_keeps_the_newest(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 48, batch=3)  # three closed segments: three appends
    await offload_closed(rig, schema(ORDER_V1))
    table = rig.tables.catalog.load_table("public.default.orders")
    assert len(table.snapshots()) == 3
    assert await rig.ledger.expire_table_snapshots(max_age_ms=3_600_000, keep=1) == 0  # young
    assert await rig.ledger.expire_table_snapshots(max_age_ms=0, keep=2) == 1
    table = rig.tables.catalog.load_table("public.default.orders")
    assert len(table.snapshots()) == 2
    assert await rig.ledger.expire_table_snapshots(max_age_ms=0, keep=0) == 1  # not the current
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(rows.num_rows))
    assert rows.num_rows == sum(
        s.end_offset - s.first_offset
        for s in rig.ledger.segments()
        if s.state is SegmentState.OFFLOADED
    )


async def test_the_partitions_of_a_topic_share_one_table(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await open_iceberg_rig(partition="public/default/orders-partition-0")
    other = await ManagedLedger.open("public/default/orders-partition-1", rig.engine, rig.tier)
    await append_orders(rig.ledger, 0, 20, batch=1)
    await append_orders(other, 100, 20, batch=1)
    for ledger in (rig.ledger, other):
        for seg in [s for s in ledger.segments() if s.state is SegmentState.CLOSED]:
            await ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
    rows = read_table(rig.tables)  # sorted by partition, then offset
    by_partition = {p: [r["id"] for r in rows.to_pylist() if r["__partition"] == p] for p in (0, 1)}
    assert by_partition[0] == list(range(len(by_partition[0])))
    assert by_partition[1] == list(range(100, 100 + len(by_partition[1])))
    assert len(by_partition[0]) == len(by_partition[1]) > 0
    assert rig.tables.catalog.list_tables(("public", "default")) == [
        ("public", "default", "orders")
    ]
    await other.trim(other.segments()[1].first_offset)  # retention in one partition only
    left = read_table(rig.tables)
    assert [r["__partition"] for r in left.to_pylist()].count(0) == len(by_partition[0])
    assert min(r["__offset"] for r in left.to_pylist() if r["__partition"] == 1) == (
        other.segments()[0].first_offset
    )


def _catalog_down(*args: Any, **kwargs: Any) -> None:
    raise OSError("catalog unreachable")


async def test_a_commit_that_cannot_be_undone_is_settled_before_the_next_attempt(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit happened, its answer was lost and the catalog then refused the undo: the
    intent stays, and the next offload finds the commit instead of adding the rows again."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    real_commit, real_remove = rig.tables.commit, rig.tables.remove

    def commit_then_fail(files):  # type: ignore[no-untyped-def]
        real_commit(files)
        raise OSError("connection reset after the commit")

    monkeypatch.setattr(rig.tables, "commit", commit_then_fail)
    monkeypatch.setattr(rig.tables, "remove", _catalog_down)
    with pytest.raises(OSError):
        await rig.ledger.offload(seg.segment_id)
    closed = rig.ledger.segments()[0]
    assert closed.state is SegmentState.CLOSED and closed.offload is not None
    assert closed.offload["iceberg"]["committed"] is False  # the intent is kept
    assert len(data_files(rig.tables)) == 1
    monkeypatch.setattr(rig.tables, "commit", real_commit)
    monkeypatch.setattr(rig.tables, "remove", real_remove)
    done = await rig.ledger.offload(seg.segment_id)
    assert done.state is SegmentState.OFFLOADED
    files = data_files(rig.tables)
    assert len(files) == 1 and Path(files[0].removeprefix("file://")).exists()
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_a_topic_opens_while_its_catalog_is_locked_and_settles_its_intent_after(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A commit that failed before it landed, with the catalog then refusing the undo, leaves
    its intent. The next owner opens the partition while another writer holds the SQLite
    catalog (a broker frozen inside its commit): the open does not wait for the table, reads
    are served, an offload waits for the intent to be settled; once the catalog is free the
    attempt is fenced out and the offload adds the segment's offsets once."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    local = messages(await read_all(rig.ledger))
    seg = rig.closed()[0]

    monkeypatch.setattr(rig.tables, "commit", _catalog_down)
    monkeypatch.setattr(rig.tables, "remove", _catalog_down)
    with pytest.raises(OSError):
        await rig.ledger.offload(seg.segment_id)
    assert rig.ledger.segments()[0].offload["iceberg"]["committed"] is False  # type: ignore[index]
    monkeypatch.undo()
    await rig.engine.unload(rig.ledger.name)

    holder = sqlite3.connect(tmp_path / "iceberg.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the catalog's write lock, held
    try:
        ledger = await asyncio.wait_for(
            ManagedLedger.open(rig.ledger.name, rig.engine, rig.tier), 10
        )
        assert messages(await read_all(ledger)) == local
        offloading = asyncio.create_task(ledger.offload(seg.segment_id))
        await asyncio.sleep(1)
        assert not offloading.done()  # the intent is not settled: nothing offloads
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    done = await offloading
    assert done.state is SegmentState.OFFLOADED
    table = rig.tables.catalog.load_table("public.default.orders")
    assert [k for k in table.properties if k.startswith("magnetar.fenced.")] != []
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))
    assert len(data_files(rig.tables)) == 1


async def test_history_offloaded_before_the_catalog_is_registered_later(
    open_iceberg_rig: OpenIcebergRig, tmp_path: Path
) -> None:
    rig = await open_iceberg_rig()
    tables, rig.tier.iceberg = rig.tier.iceberg, None  # no catalog yet
    await append_orders(rig.ledger, 0, 48, batch=3)
    segments = await offload_closed(rig)
    assert len(segments) == 3
    rig.tier.iceberg = tables
    real_commit = tables.commit

    def cut_off(files):  # type: ignore[no-untyped-def]
        raise OSError("crashed before the commit")

    tables.commit = cut_off  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await rig.ledger.register_in_table(segments[0], value_schema=schema(ORDER_V1))
    tables.commit = real_commit  # type: ignore[method-assign]
    await rig.aclose()  # the next open settles the cut-off registration
    rig = await open_iceberg_rig()
    assert rig.ledger.segments()[0].offload is not None
    assert "iceberg" not in rig.ledger.segments()[0].offload
    assert not [k for k in rig.tier.store.list() if "/iceberg-" in k]
    for segment_id in segments:
        done = await rig.ledger.register_in_table(segment_id, value_schema=schema(ORDER_V1))
        assert done.offload is not None and done.offload["iceberg"]["committed"] is True
    rows = read_table(rig.tables)
    offloaded = sum(s.end_offset - s.first_offset for s in rig.ledger.segments()[:3])
    assert rows.column("__offset").to_pylist() == list(range(offloaded))
    assert rows.column("id").to_pylist() == list(range(offloaded))
    first = rig.ledger.segments()[0]
    await rig.ledger.trim(first.end_offset)
    assert read_table(rig.tables).column("__offset").to_pylist()[0] == first.end_offset
    assert all(Path(f.removeprefix("file://")).exists() for f in data_files(rig.tables))


async def test_deleting_the_topic_empties_its_table_first(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    await offload_closed(rig, schema(ORDER_V1))
    assert read_table(rig.tables).num_rows > 0
    await rig.ledger.delete()
    table = rig.tables.catalog.load_table("public.default.orders")
    snap = table.current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary["magnetar.operation"] == "delete"
    assert table.scan().to_arrow().num_rows == 0
    assert [k for k in rig.tier.store.list() if not k.startswith("iceberg/")] == []


async def handed_over_twice(
    rig: IcebergRig,
    monkeypatch: pytest.MonkeyPatch,
    segment_id: int,
    *,
    committed: bool,
    deletes_fail: bool = False,
) -> tuple[ManagedLedger, asyncio.Task[Any]]:
    """Broker A offloads ``segment_id`` and stops just before its table commit (or just
    after, when ``committed``); meanwhile the partition goes to broker B (whose open settles
    A's cut-off attempt against the table) and back to A. With ``deletes_fail`` the store
    refuses to delete objects meanwhile, so A's data files are still there when A goes on.
    Returns A's new ledger and A's first offload, released and finished."""
    real = rig.tables.commit
    reached, go_on = _hold_commits(rig.tables, monkeypatch, committed=committed)
    broker_a, broker_b = LedgerFactory(rig.engine, rig.tier), LedgerFactory(rig.engine, rig.tier)
    first = await broker_a.open(rig.ledger.name)
    offloading = asyncio.create_task(first.offload(segment_id))
    try:
        assert await asyncio.to_thread(reached.wait, 30)
        await rig.engine.unload(rig.ledger.name)
        monkeypatch.setattr(rig.tables, "commit", real)
        if deletes_fail:
            monkeypatch.setattr(rig.tier.offloader, "delete_attempt", _store_refuses)
        await (await broker_b.open(rig.ledger.name)).settled()  # B settles A's attempt
        await rig.engine.unload(rig.ledger.name)
        again = await broker_a.open(rig.ledger.name)
        await again.settled()
    finally:
        go_on.set()
        await asyncio.wait([offloading])
    return again, offloading


def _hold_commits(
    tables: IcebergTables, monkeypatch: pytest.MonkeyPatch, *, committed: bool
) -> tuple[threading.Event, threading.Event]:
    """``tables.commit`` held before its commit (after it, when ``committed``) until the
    second event is set; the first is set when a commit is held."""
    real = tables.commit
    reached, go_on = threading.Event(), threading.Event()

    def commit_held(files):  # type: ignore[no-untyped-def]
        snapshot = real(files) if committed else None
        reached.set()
        go_on.wait(30)
        return snapshot if committed else real(files)

    monkeypatch.setattr(tables, "commit", commit_held)
    return reached, go_on


def _store_refuses(*args: Any) -> None:
    raise ObjectStoreUnavailableError("the store refuses deletes now")


async def test_a_commit_landing_after_two_handovers_is_taken_out_of_the_table(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broker A's offload recorded its intent and is about to commit when its bundle goes to
    B (whose open finds nothing in the table, drops the intent and deletes the attempt's
    files) and back to A. A's commit then fails on the missing files (had it landed, the
    attempt's refused last step would take its files out of the table again). Either way
    the table keeps no file that is gone, the segment is CLOSED and local under its owner,
    and the next offload adds the segment's offsets once."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    again, offloading = await handed_over_twice(rig, monkeypatch, seg.segment_id, committed=False)
    with pytest.raises((IcebergCommitError, SegmentNotOffloadableError)):
        offloading.result()
    assert data_files(rig.tables) == []
    info = next(s for s in again.segments() if s.segment_id == seg.segment_id)
    assert info.state is SegmentState.CLOSED and info.local
    await again.offload(seg.segment_id)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_a_commit_that_landed_before_two_handovers_is_adopted_not_dropped(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broker A's commit lands, then its bundle goes to B and back before A marks the
    segment OFFLOADED. B's open finds the commit in the table and marks the segment
    OFFLOADED from A's attempt; A's own last step is refused, and A must not delete the
    files B adopted: the rows stay in the table once and the messages read back."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    local = await read_all(rig.ledger)
    seg = rig.closed()[0]
    again, offloading = await handed_over_twice(rig, monkeypatch, seg.segment_id, committed=True)
    with pytest.raises(SegmentNotOffloadableError, match="changed meanwhile"):
        offloading.result()
    info = next(s for s in again.segments() if s.segment_id == seg.segment_id)
    assert info.state is SegmentState.OFFLOADED
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))
    await again.drop_local_copy(seg.segment_id)
    assert messages(await read_all(again)) == messages(local)


async def test_a_commit_held_past_a_handover_is_fenced_out_while_its_files_still_exist(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but B cannot delete A's data files, so A's late commit could read them and
    land: B's open fenced A's attempt in the table, and the commit is refused. Without the
    fence the table would reference files of an attempt its owner dropped (and hold the
    segment's offsets twice once the owner offloads it again)."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    again, offloading = await handed_over_twice(
        rig, monkeypatch, seg.segment_id, committed=False, deletes_fail=True
    )
    with pytest.raises(IcebergCommitError, match="fenced"):
        offloading.result()
    assert data_files(rig.tables) == []
    table = rig.tables.catalog.load_table("public.default.orders")
    assert [k for k in table.properties if k.startswith("magnetar.fenced.")] != []
    monkeypatch.undo()
    await again.offload(seg.segment_id)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_a_commit_that_loaded_the_table_before_a_fence_loses_its_race(
    open_iceberg_rig: OpenIcebergRig,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fence lands (from another broker's catalog connection) after the commit checked
    the table and before it appended: the append is not re-applied on the new table
    (pyiceberg's own retries are off for Magnetar's tables), Magnetar's retry looks again
    and refuses, says so in the log, and nothing of the attempt is in the table."""
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    seg = rig.closed()[0]
    other = IcebergTables.open(rig.tier.store, "sqlite", f"sqlite:///{tmp_path / 'iceberg.db'}")
    real_commit, real_referenced = rig.tables.commit, rig.tables._referenced

    def commit_raced(files):  # type: ignore[no-untyped-def]
        def referenced_then_fenced(table, checked):  # type: ignore[no-untyped-def]
            found = real_referenced(table, checked)
            monkeypatch.setattr(rig.tables, "_referenced", real_referenced)
            other.fence(files)  # the next owner, settling this attempt meanwhile
            return found

        monkeypatch.setattr(rig.tables, "_referenced", referenced_then_fenced)
        return real_commit(files)

    monkeypatch.setattr(rig.tables, "commit", commit_raced)
    with pytest.raises(IcebergCommitError, match="fenced"):
        await rig.ledger.offload(seg.segment_id)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [m for m in said if "is not offloaded" in m and "fenced" in m], said
    assert data_files(rig.tables) == []
    assert rig.ledger.segments()[0].state is SegmentState.CLOSED
    monkeypatch.undo()
    await rig.ledger.offload(seg.segment_id)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))


async def test_an_older_table_turns_pyicebergs_own_retries_off_at_its_next_offload(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    await append_orders(rig.ledger, 0, 20, batch=1)
    rig.tables.catalog.create_namespace(("public", "default"))
    made = rig.tables.catalog.create_table(
        ("public", "default", "orders"), schema=table_schema(None, tier_columns=True)
    )
    assert "commit.retry.num-retries" not in made.properties
    end = rig.closed()[-1].end_offset
    await offload_closed(rig)
    table = rig.tables.catalog.load_table("public.default.orders")
    assert table.properties["commit.retry.num-retries"] == "0"
    assert read_table(rig.tables).column("__offset").to_pylist() == list(range(end))


@pytest.mark.parametrize("older", [False, True], ids=["new-table", "older-table"])
async def test_avro_logical_types_are_iceberg_types_in_the_tables_this_version_makes(
    open_iceberg_rig: OpenIcebergRig, older: bool
) -> None:
    """A table this version makes types a timestamp-millis field as timestamptz, a date as
    date, a decimal as decimal (its property says so); a table made before keeps the
    stored types (a long column cannot become a timestamp), and stays so. Either way the
    messages read back byte for byte."""
    rig = await open_iceberg_rig()
    for i in range(10):
        await rig.ledger.append(
            json_entry([avro(event(i))], i),
            count=1,
            publish_time=1_700_000_000_000,
            fmt=formats.PULSAR,
        )
    local = messages(await read_all(rig.ledger))
    value_schema = ValueSchema("AVRO", (EVENT_V1,))
    if older:  # as a version before logical types made it
        rig.tables.catalog.create_namespace(("public", "default"))
        rig.tables.catalog.create_table(
            ("public", "default", "orders"), schema=table_schema(value_schema, tier_columns=True)
        )
    await offload_closed(rig, value_schema)
    table = rig.tables.catalog.load_table("public.default.orders")
    assert (table.properties.get("magnetar.logical-types") == "true") is not older
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    rows = read_table(rig.tables).select(["id", "at", "day", "ref", "amount"]).to_pylist()
    offloaded = len(rows)
    done = [s for s in rig.ledger.segments() if s.state is SegmentState.OFFLOADED]
    assert offloaded == sum(s.end_offset - s.first_offset for s in done) > 0
    if older:
        assert [types[n] for n in ("at", "day", "amount")] == ["long", "int", "binary"]
        assert rows[0]["at"] == int(event(0)["at"].timestamp() * 1000)
    else:
        assert [types[n] for n in ("at", "day", "amount")] == [
            "timestamptz",
            "date",
            "decimal(9, 2)",
        ]
        assert rows == [{**event(i), "ref": str(event(i)["ref"])} for i in range(offloaded)]
    assert messages(await read_all(rig.ledger)) == local


async def test_fences_older_than_a_week_go_when_the_next_is_written(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    name = rig.ledger.name
    rig.tables.ensure_table(name, table_schema(None, tier_columns=True))
    table = rig.tables.catalog.load_table("public.default.orders")
    week_and_a_day = int(time.time() * 1000) - 8 * 24 * 3600 * 1000
    old = {"segment": f"{name}/1", "ms": week_and_a_day}
    table.transaction().set_properties(
        {"magnetar.fenced.old": json.dumps(old)}
    ).commit_transaction()
    snapshots = len(table.snapshots())
    rig.tables.fence(SegmentFiles(name, 2, 0, 9, "new", ()))
    rig.tables.fence(SegmentFiles(name, 2, 0, 9, "new", ()))  # again: nothing changes
    table = rig.tables.catalog.load_table("public.default.orders")
    fences = {
        k: json.loads(v) for k, v in table.properties.items() if k.startswith("magnetar.fenced.")
    }
    assert list(fences) == ["magnetar.fenced.new"]
    assert fences["magnetar.fenced.new"]["segment"] == f"{name}/2"
    assert len(table.snapshots()) == snapshots + 1
    assert table.current_snapshot().summary["magnetar.operation"] == "fence"


async def test_a_registration_held_past_a_handover_is_fenced_out(
    open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill's registration of a segment offloaded before the catalog has the same
    window: broker A records its intent and is held before the commit while the partition
    goes to B (whose open fences the registration; the store refuses to delete its files
    then) and back. A's commit, which could read its files, is refused; the owner's next
    registration, an attempt of its own, adds the rows once."""
    rig = await open_iceberg_rig()
    tables, rig.tier.iceberg = rig.tier.iceberg, None  # no catalog yet
    await append_orders(rig.ledger, 0, 20, batch=1)
    segment_id = (await offload_closed(rig))[0]
    rig.tier.iceberg = tables
    real = tables.commit
    reached, go_on = _hold_commits(tables, monkeypatch, committed=False)
    broker_a, broker_b = LedgerFactory(rig.engine, rig.tier), LedgerFactory(rig.engine, rig.tier)
    first = await broker_a.open(rig.ledger.name)
    registering = asyncio.create_task(first.register_in_table(segment_id))
    try:
        assert await asyncio.to_thread(reached.wait, 30)
        await rig.engine.unload(rig.ledger.name)
        monkeypatch.setattr(tables, "commit", real)
        monkeypatch.setattr(rig.tier.store, "delete", _store_refuses)
        await (await broker_b.open(rig.ledger.name)).settled()  # B settles A's attempt
        await rig.engine.unload(rig.ledger.name)
    finally:
        go_on.set()  # A's commit goes on while its files are still there
        await asyncio.wait([registering])
    with pytest.raises(IcebergCommitError, match="fenced"):
        registering.result()
    monkeypatch.undo()
    again = await broker_a.open(rig.ledger.name)
    await again.settled()
    assert data_files(tables) == []
    done = await again.register_in_table(segment_id)
    assert done.offload is not None and done.offload["iceberg"]["committed"] is True
    seg = next(s for s in again.segments() if s.segment_id == segment_id)
    rows = read_table(tables)
    assert rows.column("__offset").to_pylist() == list(range(seg.first_offset, seg.end_offset))
