"""Message deduplication on (producer name, sequence id), as Pulsar does it.

The sequence ids travel inside each stored entry, so the state is rebuilt after a restart by
scanning entries written since the last snapshot (kept in the metadata store every
``SNAPSHOT_EVERY`` entries and on close). A producer that resends after a reconnect gets a
receipt for its original message, not a duplicate.
"""

from __future__ import annotations

import asyncio
import enum
import json

from magnetar.broker import formats
from magnetar.ledger import ManagedLedger
from magnetar.meta import MetadataStore

SNAPSHOT_EVERY = 1000


class Verdict(enum.Enum):
    NEW = "new"  # never seen: store it
    DUPLICATE = "duplicate"  # already stored: answer with a receipt, store nothing
    IN_FLIGHT = "in_flight"  # being stored right now: wait for it, then treat as duplicate


class Deduplication:
    """Highest sequence id per producer: pushed (in flight or stored) and persisted."""

    def __init__(self, meta: MetadataStore, path: str) -> None:
        self.meta = meta
        self.path = path
        self.persisted: dict[str, int] = {}
        self.pushed: dict[str, int] = {}
        self.in_flight: dict[str, asyncio.Future[None]] = {}
        self._since_snapshot = 0
        self._snapshot_offset = 0

    async def load(self, ledger: ManagedLedger) -> None:
        """Rebuild from the snapshot plus every entry stored after it."""
        node = await self.meta.get(self.path)
        if node is not None:
            raw = json.loads(node.value)
            self.persisted = {k: int(v) for k, v in raw["producers"].items()}
            self._snapshot_offset = raw["offset"]
        offset = max(self._snapshot_offset, ledger.start_offset)
        while offset < ledger.end_offset:
            entries = await ledger.read(offset, max_entries=1000)
            if not entries:
                break
            for entry in entries:
                self._record(formats.sequence_of(entry.format, entry.payload))
            offset = entries[-1].next_offset
        self.pushed = dict(self.persisted)

    def _record(self, seq: formats.Sequence | None) -> None:
        if seq is not None and seq.producer_name:
            highest = max(seq.sequence_id, seq.highest_sequence_id)
            if highest > self.persisted.get(seq.producer_name, -1):
                self.persisted[seq.producer_name] = highest

    def check(self, producer: str, sequence_id: int) -> Verdict:
        if sequence_id <= self.persisted.get(producer, -1):
            return Verdict.DUPLICATE
        if sequence_id <= self.pushed.get(producer, -1):
            return Verdict.IN_FLIGHT
        return Verdict.NEW

    def pushing(self, producer: str, highest: int) -> None:
        self.pushed[producer] = max(highest, self.pushed.get(producer, -1))

    def persisted_up_to(self, producer: str, highest: int, end_offset: int) -> bool:
        """Record a stored entry; True when a snapshot is due."""
        self.persisted[producer] = max(highest, self.persisted.get(producer, -1))
        self._since_snapshot += 1
        if self._since_snapshot >= SNAPSHOT_EVERY:
            self._since_snapshot = 0
            self._snapshot_offset = end_offset
            return True
        return False

    def failed(self, producer: str) -> None:
        """A push failed: what was pushed falls back to what is stored."""
        self.pushed[producer] = self.persisted.get(producer, -1)

    async def snapshot(self, end_offset: int | None = None) -> None:
        """Persist the state; every entry before the snapshot offset is reflected in it."""
        if end_offset is not None:
            self._snapshot_offset = end_offset
        body = {"offset": self._snapshot_offset, "producers": self.persisted}
        await self.meta.put(self.path, json.dumps(body).encode())
