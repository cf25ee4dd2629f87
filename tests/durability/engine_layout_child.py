"""A standalone that stores its ledgers the way releases before issue 13 did: on the storage
engine's own partitions (the engine assigns offsets and rolls segments). The upgrade test
writes its old directory with it, as a user's older Magnetar would have.

    python -m tests.durability.engine_layout_child standalone --data-dir DIR ...

Everything else is ``magnetar standalone``: the same CLI, broker and protocol servers.
"""

from __future__ import annotations

import sys

from magnetar import standalone
from magnetar.cli import main
from magnetar.core.config import Settings
from magnetar.meta import MetadataStore
from magnetar.storage import StorageEngine, StorageSettings


class _EngineLayout:
    """Stands in for LocalStorage in ``magnetar.standalone``: opens the engine alone."""

    @staticmethod
    async def open(settings: Settings, meta: MetadataStore) -> StorageEngine:
        return await StorageEngine.open(StorageSettings.of(settings), meta)


if __name__ == "__main__":
    standalone.LocalStorage = _EngineLayout  # type: ignore[misc,assignment]
    sys.exit(main())
