"""Each offloaded message is stored once: with a catalog, a segment's objects in the tier are
the table's data files, and the tier rebuilds the original entries from them byte for byte.
Segments offloaded the older way (``data.parquet`` beside ``iceberg-<day>.pq`` table files)
still read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magnetar.core.entries import Entry
from magnetar.storage import SegmentState
from magnetar.tier import LocalObjectStore
from tests.iceberg.conftest import OpenIcebergRig
from tests.iceberg.rig import ORDER_V1, IcebergRig, append_orders, data_files, order, read_table
from tests.iceberg.rig import schema as json_schema
from tests.tier.rig import messages, read_all

DAY_MS = 86_400_000
MIDNIGHT = 19_700 * DAY_MS  # a UTC midnight


def exact(entries: list[Entry]) -> list[tuple[int, int, int, int, int, Any]]:
    """What a consumer's messages and ids are made of, entry by entry: the batch layout,
    format and every message (value bytes, key, properties, sequence id...). (This rig's
    payloads say publish time 1 inside, which an entry rebuilt from its header does not
    repeat; a broker writes the same time in both, tests/tier/test_standalone.py.)"""
    return [
        (e.base_offset, e.count, e.publish_time, e.event_time, e.format, messages([e]))
        for e in entries
    ]


async def offload_all(rig: IcebergRig) -> list[int]:
    done = []
    for seg in rig.closed():
        await rig.ledger.offload(seg.segment_id, value_schema=json_schema(ORDER_V1))
        await rig.ledger.drop_local_copy(seg.segment_id)
        done.append(seg.segment_id)
    return done


async def test_the_segment_objects_are_the_table_data_files(
    open_iceberg_rig: OpenIcebergRig,
) -> None:
    rig = await open_iceberg_rig()
    # 14 entries of 3 orders, one a second, across a UTC midnight: the first segment's
    # entries lie on two days, so it is two data files (a file lies in one day)
    await append_orders(rig.ledger, 0, 40, batch=3, publish_time=MIDNIGHT - 3_000)
    before = exact(await read_all(rig.ledger))
    segments = await offload_all(rig)
    assert len(segments) == 2

    objects = []
    for seg in rig.ledger.segments()[:2]:
        assert seg.state is SegmentState.OFFLOADED and not seg.local and seg.offload
        objects += seg.offload["objects"]
        assert seg.offload["iceberg"]["files"] == seg.offload["objects"]
    assert len(rig.ledger.segments()[0].offload["objects"]) == 2  # type: ignore[index]
    stored = [k for k in rig.tier.store.list() if k.endswith((".parquet", ".pq"))]
    assert sorted(stored) == sorted(objects)  # no data.parquet: one copy of each message
    assert data_files(rig.tables) == sorted(rig.tables.uri(k) for k in objects)

    assert exact(await read_all(rig.ledger)) == before  # byte-identical entries and ids
    assert await rig.ledger.find_offset(MIDNIGHT) == 3  # the first entry of the second day
    rows = read_table(rig.tables)
    offloaded = rig.ledger.segments()[1].end_offset
    assert rows.column("__offset").to_pylist() == list(range(offloaded))
    assert rows.column("id").to_pylist() == [order(i)["id"] for i in range(offloaded)]


async def test_segments_offloaded_the_older_way_still_read(
    tmp_path: Path, open_iceberg_rig: OpenIcebergRig
) -> None:
    store = LocalObjectStore(tmp_path / "tier")
    rig = await open_iceberg_rig(store)
    await append_orders(rig.ledger, 0, 40, batch=3)
    tables, rig.tier.iceberg = rig.tier.iceberg, None  # a node without a catalog: data.parquet
    old = rig.closed()[0].segment_id
    await rig.ledger.offload(old)
    await rig.ledger.drop_local_copy(old)
    rig.tier.iceberg = tables
    # registered later: its rows copied into iceberg-<day>.pq table files, as offloads with
    # a catalog did before the segment objects became the table's data files
    await rig.ledger.register_in_table(old, value_schema=json_schema(ORDER_V1))
    before = exact(await read_all(rig.ledger))
    await offload_all(rig)
    await rig.aclose()

    rig = await open_iceberg_rig(store)  # as after an upgrade
    first, second = rig.ledger.segments()[:2]
    assert first.offload and first.offload["key"].endswith("/data.parquet")
    assert "objects" not in first.offload
    assert second.offload and second.offload["objects"][0].endswith("-0.parquet")
    assert not first.local and not second.local
    assert exact(await read_all(rig.ledger)) == before
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(second.end_offset))
    assert rows.column("id").to_pylist() == list(range(second.end_offset))
