"""The Iceberg crash test's child: appends orders, offloads the first closed segment and
stops inside the Iceberg commit at a chosen STAGE, printing its name, until the parent
SIGKILLs it.

    python -m tests.iceberg.commit_child ROOT STAGE

    intent     the data files are written and the intent recorded; the commit not made
    committed  the append snapshot is committed; the segment is not marked OFFLOADED
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from magnetar.tier import LocalObjectStore, SegmentFiles
from tests.iceberg.rig import ORDER_V1, IcebergRig, append_orders, schema

STAGES = ("intent", "committed")
ORDERS = 40
FOREVER = 600.0


async def main(root: Path, stage: str) -> None:
    rig = await IcebergRig.open(root, LocalObjectStore(root / "tier"))
    await append_orders(rig.ledger, 0, ORDERS, batch=3)
    real = rig.tables.commit

    def stop_in_commit(files: SegmentFiles) -> int:
        if stage == "committed":
            real(files)
        print(stage, flush=True)
        time.sleep(FOREVER)  # the parent kills us long before
        return -1

    rig.tables.commit = stop_in_commit  # type: ignore[method-assign]
    await rig.ledger.offload(rig.closed()[0].segment_id, value_schema=schema(ORDER_V1))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in STAGES:
        sys.exit(f"usage: python -m tests.iceberg.commit_child ROOT {{{'|'.join(STAGES)}}}")
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
