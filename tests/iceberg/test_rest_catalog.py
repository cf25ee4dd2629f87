"""``--iceberg-catalog rest``: offloads commit, retention removes and maintenance compacts
through an Iceberg REST catalog (tests/iceberg/rest_catalog.py, a small server of the REST
API over a SQL catalog: no REST catalog server is installed here), and a reader of that
catalog sees the rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.storage import SegmentState
from magnetar.tier import IcebergTables, LocalObjectStore
from tests.iceberg.conftest import OpenIcebergRig
from tests.iceberg.rest_catalog import RestCatalogServer
from tests.iceberg.rig import ORDER_V1, append_orders, data_files, order, read_table, schema
from tests.tier.rig import messages, read_all


@pytest.mark.slow
async def test_offloads_commit_through_a_rest_catalog(
    tmp_path: Path, open_iceberg_rig: OpenIcebergRig
) -> None:
    store = LocalObjectStore(tmp_path / "tier")
    with RestCatalogServer(tmp_path, f"{store.url}/iceberg") as server:
        rig = await open_iceberg_rig(store)
        rig.tier.iceberg = IcebergTables.open(store, "rest", server.url)
        assert rig.tables.catalog_properties()["type"] == "rest"
        await append_orders(rig.ledger, 0, 40, batch=3)  # two closed segments
        before = messages(await read_all(rig.ledger))
        for seg in rig.closed():
            await rig.ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
            await rig.ledger.drop_local_copy(seg.segment_id)
        assert any(r.startswith("POST /v1/namespaces/") for r in server.requests)  # commits

        offloaded = [s for s in rig.ledger.segments() if s.state is SegmentState.OFFLOADED]
        rows = read_table(rig.tables)  # read through the REST catalog
        end = offloaded[-1].end_offset
        assert rows.column("__offset").to_pylist() == list(range(end))
        assert rows.column("id").to_pylist() == [order(i)["id"] for i in range(end)]
        assert server.catalog.load_table("public.default.orders").scan().to_arrow().num_rows == end
        assert messages(await read_all(rig.ledger)) == before

        assert await rig.ledger.compact_table(min_files=2) == 1  # a replace snapshot
        assert len(data_files(rig.tables)) == 1
        assert messages(await read_all(rig.ledger)) == before
        await rig.ledger.trim(end)  # retention: an overwrite snapshot
        assert data_files(rig.tables) == []
