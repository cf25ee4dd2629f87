"""``magnetar standalone``: every part of Magnetar in one process.

At this stage it opens the metadata store and the storage engine (recovering them), reports
where its data lives, and serves until SIGINT/SIGTERM, then shuts down cleanly. Protocol
listeners are added by later layers; their ports are already part of the settings.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.core.config import Settings
from magnetar.meta import MetadataStore, open_metadata_store
from magnetar.storage import StorageEngine


@dataclass
class Standalone:
    """The assembled node; open with :meth:`start`, release with :meth:`aclose`."""

    settings: Settings
    meta: MetadataStore
    storage: StorageEngine

    @classmethod
    async def start(cls, settings: Settings) -> Standalone:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        meta = open_metadata_store(settings.metadata)
        try:
            storage = await StorageEngine.open(settings, meta)
        except BaseException:
            await meta.aclose()
            raise
        return cls(settings, meta, storage)

    def describe(self) -> str:
        s = self.settings
        parts = self.storage.partitions()
        return (
            f"magnetar standalone ready: data in {s.data_dir.resolve()} "
            f"(journal {s.journal_path}, ledgers {s.ledger_path}, metadata {s.metadata}, "
            f"fsync {s.fsync}); {len(parts)} partition(s)"
        )

    async def aclose(self) -> None:
        try:
            await self.storage.aclose()
        finally:
            await self.meta.aclose()


async def serve(settings: Settings, *, announce: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT or SIGTERM."""
    node = await Standalone.start(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        (announce or _print)(node.describe())
        await stop.wait()
    finally:
        await node.aclose()


def _print(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()
