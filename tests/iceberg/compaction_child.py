"""The compaction crash test's child: appends orders, offloads four segments, then compacts
their data files and stops at a chosen STAGE, printing its name, until the parent SIGKILLs
it.

    python -m tests.iceberg.compaction_child ROOT STAGE

    intent     the intent is recorded in the first segment's record; no file written
    writing    the new file's bytes are in the store under a temporary name, not moved in
    written    the new file is written and verified; the table not changed
    committed  the table's replace snapshot is committed; no record points at the new file
    pointing   the first segment's record points at the new file, the others not yet
    deleting   every record points at the new file; one of the old files is deleted
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from magnetar.tier import LocalObjectStore
from tests.iceberg.rig import ORDER_V1, IcebergRig, append_orders, schema

STAGES = ("intent", "writing", "written", "committed", "pointing", "deleting")
ORDERS = 64  # 22 entries of 3: four closed segments of 5 entries, the open one
FOREVER = 600.0


def stop(stage: str) -> None:
    print(stage, flush=True)
    time.sleep(FOREVER)  # the parent kills us long before


class Stops:
    """Wraps the calls a compaction makes, to stop right after the chosen stage."""

    def __init__(self, rig: IcebergRig, stage: str) -> None:
        self.rig, self.stage = rig, stage
        self.committed = False
        self.updates_after_commit = 0

    def install(self) -> None:
        tier, tables = self.rig.tier, self.rig.tables
        compact, replace = tier.offloader.compact, tables.replace
        publish, delete = tier.store._publish, tier.store.delete  # type: ignore[attr-defined]
        update = self.rig.engine.update_segment

        def compact_at(keys: list[str], key: str) -> dict[str, Any]:
            if self.stage == "intent":
                stop("intent")
            return compact(keys, key)

        def publish_at(tmp: str, key: str) -> None:
            if self.stage == "writing" and "/compact-" in key:
                stop("writing")
            publish(tmp, key)

        def replace_at(*args: Any) -> int:
            if self.stage == "written":
                stop("written")
            done = replace(*args)
            self.committed = True
            if self.stage == "committed":
                stop("committed")
            return done

        async def update_at(*args: Any, **kwargs: Any) -> Any:
            done = await update(*args, **kwargs)
            if self.committed:
                self.updates_after_commit += 1
                if self.stage == "pointing" and self.updates_after_commit == 1:
                    stop("pointing")
            return done

        def delete_at(key: str) -> None:
            delete(key)
            if self.stage == "deleting" and self.committed and "/compact-" not in key:
                stop("deleting")

        tier.offloader.compact = compact_at  # type: ignore[method-assign]
        tier.store._publish = publish_at  # type: ignore[attr-defined]
        tier.store.delete = delete_at  # type: ignore[method-assign]
        tables.replace = replace_at  # type: ignore[method-assign]
        self.rig.engine.update_segment = update_at  # type: ignore[method-assign]


async def main(root: Path, stage: str) -> None:
    rig = await IcebergRig.open(root, LocalObjectStore(root / "tier"))
    await append_orders(rig.ledger, 0, ORDERS, batch=3)
    for seg in rig.closed():
        await rig.ledger.offload(seg.segment_id, value_schema=schema(ORDER_V1))
        await rig.ledger.drop_local_copy(seg.segment_id)
    print("offloaded", flush=True)
    Stops(rig, stage).install()
    await rig.ledger.compact_table(min_files=2)
    print("finished", flush=True)  # a stage that was never reached: the parent fails


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in STAGES:
        sys.exit(f"usage: python -m tests.iceberg.compaction_child ROOT {{{'|'.join(STAGES)}}}")
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
