"""The transactions of one partition as every reader sees them (Kafka's KIP-98 batches).

A Kafka transactional producer writes its batches into a partition, then its coordinator
writes a COMMIT or ABORT marker. Until the marker the transaction is *open*; the partition's
last stable offset (LSO) is the first offset of its oldest open transaction (the end offset
when none is open). Every reader follows Kafka's ``read_committed``: nothing at or after the
LSO is delivered (non-transactional messages after an open transaction wait too, as they do
for a read_committed Kafka consumer and behind Pulsar's own maxReadPosition), and once the
LSO has passed them, an aborted transaction's messages and the markers themselves are
never delivered — a Pulsar subscription acknowledges them for its consumers. Offsets and
message ids do not change: what is hidden leaves a gap.

The index is durable in the metadata store (``/transactions/<topic path>``) as a snapshot
plus the offset it was taken at (``scanFrom``): every transaction open then is in it, and
everything after that offset is in the log, where a transactional batch with no open
transaction of its producer opens one and a marker ends it. Loading replays the log from the
oldest recorded open transaction (or ``scanFrom``) to the end. So opening a transaction
writes nothing (its batch lands after ``scanFrom``), except the very first one of a partition,
which creates the record before its batch is appended; ends, and the offset with them, are
recorded in the background, coalesced. Aborted transactions whose marker retention has
deleted are forgotten.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.broker import formats
from magnetar.core.entries import Entry
from magnetar.ledger import ManagedLedger
from magnetar.meta import MetadataStore

ROOT = "/transactions"
READ_ENTRIES = 1000


@dataclass(frozen=True, slots=True)
class Aborted:
    producer_id: int
    first: int  # first offset of the transaction (or before it)
    last: int  # offset of its ABORT marker


@dataclass(eq=False)
class TransactionIndex:
    """Open and aborted transactions of one partition; see the module's docstring."""

    meta: MetadataStore
    path: str  # the topic's path (tenant/namespace/local)
    ledger: ManagedLedger
    open: dict[int, int] = field(default_factory=dict)  # producer id → first offset
    aborted: list[Aborted] = field(default_factory=list)  # by marker offset
    used: bool = False  # a transaction ever wrote here (the record exists)
    _listeners: list[Callable[[], None]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _saving: asyncio.Task[None] | None = None
    _dirty: bool = False

    @property
    def node(self) -> str:
        return f"{ROOT}/{self.path}"

    async def load(self) -> None:
        """Read the record, then replay the log after it (transactions it did not see
        open or end)."""
        found = await self.meta.get(self.node)
        if found is None:
            return
        raw = json.loads(found.value)
        self.used = True
        self.open = {int(p): int(first) for p, first in raw["open"].items()}
        self.aborted = [Aborted(*a) for a in raw["aborted"]]
        # records written before scanFrom existed held every open transaction
        scan_from = int(raw.get("scanFrom", self.ledger.end_offset))
        if await self._replay(min([*self.open.values(), scan_from])):
            await self._save()

    async def _replay(self, offset: int) -> bool:
        """Apply the log from ``offset`` on: batches open their producer's transaction,
        markers end it. True if anything changed."""
        offset, changed = max(offset, self.ledger.start_offset), False
        known = {(a.producer_id, a.last) for a in self.aborted}
        while offset < self.ledger.end_offset:
            entries = await self.ledger.read(offset, max_entries=READ_ENTRIES)
            if not entries:
                break
            for entry in entries:
                mark = formats.transaction_of(entry.format, entry.payload)
                if mark is None:
                    continue
                pid = mark.producer_id
                if not mark.control:
                    if pid not in self.open:
                        self.open[pid], changed = entry.base_offset, True
                elif pid in self.open:
                    if (pid, entry.base_offset) in known:  # in the record already
                        self.open.pop(pid)
                    else:
                        self._close(pid, mark.commit, entry.base_offset)
                    changed = True
            offset = entries[-1].next_offset
        return changed

    # -- changes ----------------------------------------------------------------------

    async def opening(self, producer_id: int, at_least: int) -> None:
        """A transactional batch of ``producer_id`` is about to be appended at ``at_least``
        or later: its transaction opens there unless it is open. Durable on return: the
        record's ``scanFrom`` is at or below ``at_least``, so a load replays the batch; only
        a partition's first transaction waits for the record to be created."""
        if producer_id in self.open:
            return
        self.open[producer_id] = at_least
        if not self.used:
            async with self._lock:
                if not self.used:
                    await self._save()

    def ended(self, producer_id: int, commit: bool, offset: int) -> None:
        """The marker of ``producer_id``'s transaction was appended at ``offset``: readers
        waiting at the LSO are woken at once; the record follows in the background."""
        if self._close(producer_id, commit, offset):
            self._dirty = True
            if self._saving is None or self._saving.done():
                self._saving = asyncio.get_running_loop().create_task(self._save_dirty())
        for listener in list(self._listeners):
            listener()

    async def _save_dirty(self) -> None:
        while self._dirty:  # coalesced: one write for the markers that came meanwhile
            self._dirty = False
            async with self._lock:
                await self._save()

    async def flush(self) -> None:
        """Return once the record holds every transaction ended so far."""
        while self._saving is not None and not self._saving.done():
            await asyncio.shield(self._saving)

    def _close(self, producer_id: int, commit: bool, offset: int) -> bool:
        first = self.open.pop(producer_id, None)
        if first is None:
            return False
        if not commit:
            self.aborted.append(Aborted(producer_id, first, offset))
        return True

    async def _save(self) -> None:
        start, scan_from = self.ledger.start_offset, self.ledger.end_offset
        self.aborted = [a for a in self.aborted if a.last >= start]  # retention took them
        body = {
            "open": {str(p): first for p, first in self.open.items()},
            "aborted": [[a.producer_id, a.first, a.last] for a in self.aborted],
            "scanFrom": scan_from,  # what opens or ends after this is in the log
        }
        await self.meta.put(self.node, json.dumps(body).encode())
        self.used = True

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` whenever a transaction ends; returns its remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # -- what readers see -------------------------------------------------------------

    def last_stable(self, end_offset: int | None = None) -> int:
        """The offset below which every transaction is decided (readers stop there)."""
        end = self.ledger.end_offset if end_offset is None else end_offset
        return min(min(self.open.values(), default=end), end)

    def aborted_in(self, start: int, end: int) -> list[Aborted]:
        """The aborted transactions that overlap ``start..end``."""
        return [a for a in self.aborted if a.last >= start and a.first < end]

    def hides(self, entry: Entry) -> bool:
        """Whether ``entry`` (below the LSO) is a marker or data of an aborted transaction."""
        if not self.used:
            return False
        mark = formats.transaction_of(entry.format, entry.payload)
        if mark is None:
            return False
        return mark.control or any(
            a.producer_id == mark.producer_id and a.first <= entry.base_offset <= a.last
            for a in self.aborted
        )

    async def last_visible(self) -> Entry | None:
        """The last entry below the LSO that readers get, or None if there is none (what
        Pulsar's GetLastMessageId answers: a reader has messages available up to it)."""
        position = self.last_stable()
        start = self.ledger.start_offset
        while position > start:
            got = await self.ledger.read(position - 1, max_entries=1)
            if not got:
                return None
            entry = got[0]
            if not self.hides(entry):
                return entry
            position = entry.base_offset
        return None

    async def delete(self) -> None:
        """Drop the record (the topic is being deleted)."""
        await self.flush()  # a save still under way would write it again
        await self.meta.delete_recursive(self.node)
