"""Where each partition's log starts once records were deleted ahead of retention (Kafka's
DeleteRecords: the log start offset), kept in the metadata store.

/log-start/<topic path>   the first offset a reader can get (decimal text)

The managed ledger hides the records below it at once (``ManagedLedger.delete_before``); the
broker sets it again whenever it opens the ledger, so it holds across restarts and moves.
"""

from __future__ import annotations

from magnetar.core.names import TopicName
from magnetar.meta import MetadataStore

ROOT = "/log-start"


def log_start_path(name: TopicName) -> str:
    return f"{ROOT}/{name.path}"


class LogStarts:
    """The log start offsets set by records deletions, by partition."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta

    async def get(self, name: TopicName) -> int:
        """The offset records of ``name`` were deleted before; 0 when none were."""
        node = await self.meta.get(log_start_path(name))
        return int(node.value) if node is not None else 0

    async def set(self, name: TopicName, offset: int) -> None:
        """Durable when this returns."""
        await self.meta.put(log_start_path(name), str(offset).encode())

    async def delete(self, name: TopicName) -> None:
        if await self.meta.exists(log_start_path(name)):
            await self.meta.delete(log_start_path(name))
