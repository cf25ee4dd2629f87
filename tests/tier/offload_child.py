"""The crash test's child: appends a deterministic stream, then offloads its first closed
segment and stops at a chosen STAGE, printing the stage's name, until the parent SIGKILLs it.

    python -m tests.tier.offload_child ROOT STAGE

ROOT holds ``data`` (the engine) and ``tier`` (a local object store, wrapped in a
FaultyObjectStore to hold the offload where the stage says):

    upload     the Parquet upload was cut off half-way (a temporary object is left)
    verify     the object is fully written; the offloader is reading it back
    offloaded  the segment is OFFLOADED; its local copy still exists
    dropped    the segment is OFFLOADED and its local copy deleted
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from magnetar.storage import SegmentInfo, SegmentState
from magnetar.testing.faults import FaultyObjectStore
from magnetar.tier import LocalObjectStore
from tests.tier.rig import Rig, append_mixed, rig_settings

ENTRIES = 12  # two closed segments of five entries, two entries in the open one
STAGES = ("upload", "verify", "offloaded", "dropped")
FOREVER = 600.0


async def main(root: Path, stage: str) -> None:
    store = FaultyObjectStore(LocalObjectStore(root / "tier"))
    rig = await Rig.open(rig_settings(root / "data"), store, row_group_rows=4)
    await append_mixed(rig.ledger, ENTRIES)
    first = rig.in_state(SegmentState.CLOSED)[0].segment_id
    held: asyncio.Task[SegmentInfo] | None = None  # referenced, so it is not collected
    if stage in ("upload", "verify"):
        if stage == "upload":
            store.fail("put", partial=True, times=1)
        gate = store.block("put" if stage == "upload" else "get")
        held = asyncio.create_task(rig.ledger.offload(first))
        await asyncio.to_thread(gate.reached.wait, FOREVER)
    else:
        await rig.ledger.offload(first)
        if stage == "dropped":
            await rig.ledger.drop_local_copy(first)
    print(stage, flush=True)
    await asyncio.sleep(FOREVER)  # the parent kills us long before
    if held is not None:
        held.cancel()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in STAGES:
        sys.exit(f"usage: python -m tests.tier.offload_child ROOT {{{'|'.join(STAGES)}}}")
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
