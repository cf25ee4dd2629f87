"""Table maintenance compacts small segments' data files into one, in a replace snapshot,
without changing what any offset reads; retention then trims a compacted run whole; a
compaction cut off after its commit is finished at the next open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import SegmentState
from magnetar.tier import LocalObjectStore
from tests.iceberg.conftest import OpenIcebergRig
from tests.iceberg.rig import ORDER_V1, IcebergRig, append_orders, data_files, read_table, schema
from tests.tier.rig import messages, read_all


async def offloaded_rig(open_iceberg_rig: OpenIcebergRig, **kw: Any) -> IcebergRig:
    rig = await open_iceberg_rig(**kw)
    await append_orders(rig.ledger, 0, 64, batch=3)  # 22 entries: four closed segments of 5
    for seg in rig.closed():
        await rig.ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
        await rig.ledger.drop_local_copy(seg.segment_id)
    return rig


def seen(entries: list[Any]) -> list[Any]:
    """Each entry's place, batch layout and messages: what consumers and ids are made of."""
    return [(e.base_offset, e.count, e.segment_id, messages([e])) for e in entries]


async def by_time(rig: IcebergRig) -> list[int]:
    return [await rig.ledger.find_offset(1_700_000_000_000 + s * 1000) for s in range(0, 30, 4)]


async def test_compaction_keeps_every_offset_and_drops_the_file_count(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await offloaded_rig(open_iceberg_rig)
    offloaded = [s for s in rig.ledger.segments() if s.state is SegmentState.OFFLOADED]
    assert len(offloaded) == 4
    before, rows_before, times = seen(await read_all(rig.ledger)), read_table(rig.tables), None
    times = await by_time(rig)
    old_files = data_files(rig.tables)
    assert len(old_files) == 4

    assert await rig.ledger.compact_table() == 0  # fewer than 5 files (Iceberg's default)
    assert await rig.ledger.compact_table(min_files=2) == 3
    assert len(data_files(rig.tables)) == 1  # four small files → one
    assert read_table(rig.tables).equals(rows_before)  # the table reads the same rows
    assert seen(await read_all(rig.ledger)) == before  # and so does every offset
    assert await by_time(rig) == times
    stored = {rig.tables.uri(k) for k in rig.tier.store.list() if k.endswith(".parquet")}
    assert stored == set(data_files(rig.tables))  # the replaced files are deleted
    snap = rig.tables.catalog.load_table("public.default.orders").current_snapshot()
    assert snap is not None and snap.summary is not None
    assert snap.summary["magnetar.operation"] == "compaction"
    summary = json.loads(snap.summary["magnetar.segments"])
    assert [s["segment"] for s in summary] == [s.segment_id for s in offloaded]
    assert await rig.ledger.compact_table(min_files=2) == 0  # nothing small is left

    await rig.aclose()
    rig = await open_iceberg_rig()  # the records name the compacted file
    assert seen(await read_all(rig.ledger)) == before


async def test_retention_trims_a_compacted_run_whole(open_iceberg_rig: OpenIcebergRig) -> None:
    rig = await offloaded_rig(open_iceberg_rig)
    segments = rig.ledger.segments()
    await rig.ledger.compact_table(min_files=2)
    # the run's file also holds offsets at or after segment 2: nothing of the run goes
    assert await rig.ledger.trim(segments[2].first_offset) == []
    assert read_table(rig.tables).num_rows == segments[3].end_offset
    deleted = await rig.ledger.trim(segments[3].end_offset)  # the whole run expired
    assert [s.segment_id for s in deleted] == [s.segment_id for s in segments[:4]]
    assert data_files(rig.tables) == []
    assert not [k for k in rig.tier.store.list() if k.endswith(".parquet")]


async def test_a_compaction_cut_off_after_its_commit_is_finished_at_open(
    tmp_path: Path, open_iceberg_rig: OpenIcebergRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalObjectStore(tmp_path / "tier")
    rig = await offloaded_rig(open_iceberg_rig, store=store)
    before = seen(await read_all(rig.ledger))
    real = rig.tables.replace

    def replace_then_fail(*args: Any) -> int:
        real(*args)
        raise OSError("crashed after the commit")

    monkeypatch.setattr(rig.tables, "replace", replace_then_fail)
    with pytest.raises(OSError):
        await rig.ledger.compact_table(min_files=2)
    assert len(data_files(rig.tables)) == 1
    assert seen(await read_all(rig.ledger)) == before  # the old files are still there
    await rig.aclose()

    rig = await open_iceberg_rig(store)  # the open settles the compaction
    assert all("compaction" not in (s.offload or {}) for s in rig.ledger.segments())
    assert seen(await read_all(rig.ledger)) == before
    stored = {rig.tables.uri(k) for k in store.list() if k.endswith(".parquet")}
    assert stored == set(data_files(rig.tables))
    assert len(stored) == 1


async def test_the_spark_source_reads_each_segment_of_a_compacted_file(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    from magnetar.spark.planning import Slice
    from magnetar.spark.reading import read_slice

    rig = await offloaded_rig(open_iceberg_rig)
    await rig.ledger.compact_table(min_files=2)
    for seg in rig.ledger.segments()[:4]:
        [key] = (seg.offload or {})["objects"]
        piece = Slice("parquet", "orders", 0, rig.ledger.name, seg.first_offset, seg.end_offset,
                      rig.tier.store.url, key)  # fmt: skip
        rows = [r for batch in read_slice(piece, None) for r in batch.to_pylist()]
        assert [r["offset"] for r in rows] == list(range(seg.first_offset, seg.end_offset))
        assert [json.loads(r["value"])["id"] for r in rows] == [r["offset"] for r in rows]
