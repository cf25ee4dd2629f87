"""kill -9 inside an Iceberg commit: the table stays consistent and the segment ends up
offloaded exactly once — no data file in the table twice, none it references missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.ledger.errors import SegmentNotOffloadableError
from magnetar.storage import SegmentState
from magnetar.tier import LocalObjectStore
from tests.iceberg import commit_child
from tests.iceberg.conftest import OpenIcebergRig, killed_at
from tests.iceberg.rig import ORDER_V1, data_files, order, read_table, schema
from tests.tier.rig import messages, read_all


@pytest.mark.slow
@pytest.mark.parametrize("stage", commit_child.STAGES)
async def test_sigkill_during_an_iceberg_commit_offloads_the_segment_once(
    tmp_path: Path, open_iceberg_rig: OpenIcebergRig, stage: str
) -> None:
    await killed_at("tests.iceberg.commit_child", tmp_path, stage, timeout=60)

    store = LocalObjectStore(tmp_path / "tier")
    rig = await open_iceberg_rig(store)  # the ledger's open reconciles with the table
    first = rig.ledger.segments()[0]
    attempt_files = [k for k in store.list() if "/iceberg-" in k]
    if stage == "committed":  # the commit happened: the segment is OFFLOADED, once
        assert first.state is SegmentState.OFFLOADED
        assert first.offload is not None and first.offload["iceberg"]["committed"] is True
        assert len(attempt_files) == 1
    else:  # it did not: the segment is local and CLOSED, the attempt's files are gone
        assert (first.state, first.local) == (SegmentState.CLOSED, True)
        assert attempt_files == []
        assert not [k for k in store.list() if k.endswith(".parquet")]
        await rig.ledger.offload(first.segment_id, value_schema=schema(ORDER_V1))
    files = data_files(rig.tables)
    assert len(files) == len(set(files)) == 1
    assert all(Path(f.removeprefix("file://")).exists() for f in files)
    rows = read_table(rig.tables)
    assert rows.column("__offset").to_pylist() == list(range(first.first_offset, first.end_offset))
    assert rows.column("id").to_pylist() == [order(i)["id"] for i in range(first.end_offset)]
    with pytest.raises(SegmentNotOffloadableError, match="only a CLOSED segment"):
        await rig.ledger.offload(first.segment_id, value_schema=schema(ORDER_V1))
    assert len(data_files(rig.tables)) == 1
    assert len(messages(await read_all(rig.ledger))) == commit_child.ORDERS
