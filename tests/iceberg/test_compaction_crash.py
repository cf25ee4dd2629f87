"""kill -9 during table compaction, at each risky point: after the next open the table is
consistent — every offloaded offset in it exactly once, no data file referenced twice, none
missing, no stray object in the store — every offset reads as before, and a later
compaction completes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.storage import SegmentState
from magnetar.tier import LocalObjectStore
from tests.iceberg import compaction_child
from tests.iceberg.conftest import OpenIcebergRig, killed_at
from tests.iceberg.rig import IcebergRig, data_files, order, read_table
from tests.tier.rig import messages, read_all

COMMITTED = ("committed", "pointing", "deleting")  # stages after the table's commit


def check_consistent(rig: IcebergRig, store: LocalObjectStore, offloaded_end: int) -> list[str]:
    """The table's invariants; returns its data files."""
    files = data_files(rig.tables)
    assert len(files) == len(set(files))  # no data file referenced twice
    assert all(Path(f.removeprefix("file://")).exists() for f in files)  # none missing
    stored = {rig.tables.uri(k) for k in store.list() if ".parquet" in k}
    assert stored == set(files)  # no stray file (nor temporary upload) left behind
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(offloaded_end))  # each once
    assert rows.column("id").to_pylist() == [order(i)["id"] for i in range(offloaded_end)]
    for seg in rig.ledger.segments():
        assert "compaction" not in (seg.offload or {})  # settled
    return files


async def reads_every_order(rig: IcebergRig) -> None:
    got = messages(await read_all(rig.ledger))
    assert [offset for offset, _ in got] == list(range(compaction_child.ORDERS))
    assert [json.loads(row.value)["id"] for _, row in got] == list(range(compaction_child.ORDERS))


@pytest.mark.slow
@pytest.mark.parametrize("stage", compaction_child.STAGES)
async def test_sigkill_during_compaction_leaves_the_table_consistent(
    tmp_path: Path, open_iceberg_rig: OpenIcebergRig, stage: str
) -> None:
    await killed_at("tests.iceberg.compaction_child", tmp_path, stage, timeout=90)

    store = LocalObjectStore(tmp_path / "tier")
    rig = await open_iceberg_rig(store)  # the ledger's open settles the compaction
    run = [s for s in rig.ledger.segments() if s.state is SegmentState.OFFLOADED]
    assert len(run) == 4
    end = run[-1].end_offset
    files = check_consistent(rig, store, end)
    keys = [(s.offload or {}).get("objects") for s in run]
    if stage in COMMITTED:  # finished: one file, every segment of the run reads from it
        assert len(files) == 1 and "/compact-" in files[0]
        assert all(k == keys[0] and len(k or []) == 1 for k in keys)
        assert all((s.offload or {}).get("compacted") for s in run)
    else:  # undone: the four segments' own files, and nothing of the compaction
        assert len(files) == 4 and not [f for f in files if "/compact-" in f]
        assert not [k for k in store.list() if "/compact-" in k]
    await reads_every_order(rig)

    # A later compaction completes (or finds nothing left to do) and changes no offset.
    assert await rig.ledger.compact_table(min_files=2) == (0 if stage in COMMITTED else 3)
    [file] = check_consistent(rig, store, end)
    await reads_every_order(rig)
    await rig.aclose()
    rig = await open_iceberg_rig(store)
    assert check_consistent(rig, store, end) == [file]
    await reads_every_order(rig)
