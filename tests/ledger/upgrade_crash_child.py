"""The upgrade's kill -9 test child: runs :func:`magnetar.ledger.upgrade.upgrade` on a data
directory and SIGKILLs itself right after a chosen step.

    python -m tests.ledger.upgrade_crash_child DATA_DIR KIND N

It kills itself after the N-th step of kind KIND (a :class:`StepKind`: ``copied``,
``ledger``, ``listed`` or ``deleted``), copying BATCH entries at a time so that a kill
after a ``copied`` step can leave a ledger half copied. If the upgrade ends first it prints
``finished`` and exits 0.

The parent imports :func:`open_dir` and :func:`write_old_layout` from here, so both open
the directory alike.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from magnetar.core.config import build_settings
from magnetar.ledger.upgrade import StepKind, UpgradeStep, upgrade
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import SegmentState, StorageEngine, StorageSettings
from magnetar.storage.ledger_store import LedgerStore

SEGMENT_ENTRIES = 4  # the engine rolls every 4 entries: several segments per partition
BATCH = 3  # entries copied together: a segment's copy takes two steps
FINISHED = "finished"
OFFLOAD = {"object": "tier/a/2.parquet", "rows": 8, "attempt": "a1"}


@dataclass(slots=True)
class Dir:
    meta: MetadataStore
    engine: StorageEngine
    store: LedgerStore

    async def aclose(self) -> None:
        await self.engine.aclose()
        await self.meta.aclose()


async def open_dir(data_dir: Path) -> Dir:
    overrides = {"data_dir": data_dir, "fsync": "always", "segment_max_entries": SEGMENT_ENTRIES}
    settings = build_settings(env={}, overrides=overrides)
    meta = open_metadata_store(settings.metadata)
    engine = await StorageEngine.open(StorageSettings.of(settings), meta)
    return Dir(meta, engine, await LedgerStore.open(engine, data_dir / "fenced.json"))


async def write_old_layout(engine: StorageEngine) -> None:
    """Three partitions as the engine's API leaves them: ``a`` with a trimmed start, an
    OFFLOADED segment without local copy, an OFFLOADED one with it, an OPEN last one and
    entries of several messages, event times and a format byte; ``b`` plain, ending in an
    empty OPEN segment; ``c`` never written to."""
    a, b, c = "public/default/a", "public/default/b", "public/default/c"
    for name in (a, b, c):
        await engine.create_partition(name)
    for i in range(18):
        event, fmt = (1_700_000_000_000 + i, 1) if i % 3 == 0 else (-1, 0)
        await engine.append(a, b"a%d" % i, count=1 + i % 4, event_time=event, fmt=fmt)
    for i in range(8):
        await engine.append(b, b"b%d" % i, publish_time=1_000 + i)
    first, second, third, *_ = engine.segments(a)
    assert first.state is SegmentState.CLOSED and engine.segments(a)[-1].entries == 2
    assert [s.segment_id for s in await engine.trim(a, first.end_offset)] == [first.segment_id]
    await engine.update_segment(a, second.segment_id, state=SegmentState.OFFLOADED, offload=OFFLOAD)
    await engine.drop_local_copy(a, second.segment_id)
    await engine.update_segment(a, third.segment_id, state=SegmentState.OFFLOADED, offload=OFFLOAD)
    assert engine.segments(b)[-1].is_empty  # rolled after its 8th entry


async def run(data_dir: Path, kind: str, n: int) -> None:
    kill_after = StepKind(kind)  # an unknown kind fails here, not silently never
    opened = await open_dir(data_dir)
    seen = 0

    def step(done: UpgradeStep) -> None:
        nonlocal seen
        if done.kind is kill_after:
            seen += 1
            if seen == n:
                os.kill(os.getpid(), signal.SIGKILL)

    await upgrade(opened.engine, opened.store, opened.meta, batch=BATCH, on_step=step)
    await opened.aclose()
    print(FINISHED, flush=True)


def main(argv: list[str]) -> None:
    data_dir, kind, n = argv
    asyncio.run(run(Path(data_dir), kind, int(n)))


if __name__ == "__main__":
    main(sys.argv[1:])
