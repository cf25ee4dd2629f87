"""The kill -9 test's child: a SegmentWriter over LocalSegments appending numbered entries
until it is killed.

    python -m tests.ledger.local_crash_child DATA_DIR SIDE_FILE

It opens the data directory as a process would (SQLite metadata, engine, LedgerStore,
LocalSegments, the partition's writer, recovering what a previous writer left), prints
``ready``, then appends entry ``n`` (payload ``n`` in ASCII, one message each) for n = 0,
1, 2, ... with up to WINDOW appends in flight, and writes ``ack <n> <offset>`` to SIDE_FILE
as each is acknowledged (one ``os.write`` of a whole line on an O_APPEND descriptor: a
SIGKILL keeps what was written). After PROGRESS acknowledgements it prints ``acked``.

The parent imports :func:`open_local` from here, so both open the directory alike.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from magnetar.core.clock import SYSTEM_CLOCK
from magnetar.core.config import build_settings
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import RolloverPolicy
from magnetar.ledger.writer import SegmentIds, SegmentWriter
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import StorageEngine, StorageSettings
from magnetar.storage.ledger_store import LedgerStore

NAME = "public/default/crash"
SEGMENT_ENTRIES = 40  # the writer rolls every 40 entries: several segments per run
WINDOW = 16
PROGRESS = 300
READY, ACKED = "ready", "acked"


@dataclass(slots=True)
class Local:
    meta: MetadataStore
    engine: StorageEngine
    segments: LocalSegments
    writer: SegmentWriter

    async def aclose(self) -> None:
        await self.engine.aclose()
        await self.meta.aclose()


async def open_local(data_dir: Path) -> Local:
    settings = build_settings(env={}, overrides={"data_dir": data_dir, "fsync": "always"})
    meta = open_metadata_store(settings.metadata)
    engine = await StorageEngine.open(StorageSettings.of(settings), meta)
    store = await LedgerStore.open(engine, data_dir / "fenced.json")
    segments = LocalSegments(store)
    policy = RolloverPolicy(1 << 30, max_entries=SEGMENT_ENTRIES)
    writer = await SegmentWriter.open(NAME, segments, meta, SegmentIds(meta), policy, SYSTEM_CLOCK)
    return Local(meta, engine, segments, writer)


async def run(data_dir: Path, side_path: Path) -> None:
    local = await open_local(data_dir)
    side = os.open(side_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    window = asyncio.Semaphore(WINDOW)
    acked = 0

    async def one(n: int) -> None:
        nonlocal acked
        try:
            entry = await local.writer.append(str(n).encode())
            os.write(side, f"ack {n} {entry.base_offset}\n".encode())
            acked += 1
            if acked == PROGRESS:
                print(ACKED, flush=True)
        except Exception:  # an append failed: the parent sees the exit and the stderr
            traceback.print_exc()
            os._exit(1)
        finally:
            window.release()

    print(READY, flush=True)
    tasks = set()
    for n in itertools.count():
        await window.acquire()
        task = asyncio.create_task(one(n))  # started in order: offsets follow n
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def main(argv: list[str]) -> None:
    data_dir, side_path = argv
    asyncio.run(run(Path(data_dir), Path(side_path)))


if __name__ == "__main__":
    main(sys.argv[1:])
