"""Entries of many ledgers in one storage engine: what a bookie keeps on its own disk.

Each ledger (a segment of a partition, as the segment-addressed writer sees it) is a
partition ``L<ledger id>`` of the engine, and each of its entries is stored as a
:class:`~magnetar.storage.ledger_records.Record` carrying its ledger entry id. The store
may so hold any subset of a ledger's entries, in any order (a storage node of a replicated
ledger gets a stripe, write-backs of a recovery, a repair's copy); its index (entry id →
engine offset) is rebuilt from the records when the store opens.

Fencing (BookKeeper's fencing read): once :meth:`LedgerStore.fence` returns, the flag is
on disk (``fenced.json``, rewritten whole and renamed) and every add accepted before it
has finished; later adds of that ledger fail with FencedError unless they come from a
recoverer. A storage node serves this store over the network (``magnetar.cluster.node``);
a single process writes through it locally (``magnetar.ledger.local_segments``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.core.entries import Entry
from magnetar.core.futures import resolve
from magnetar.storage.engine import StorageEngine
from magnetar.storage.errors import CorruptionError, FencedError, StorageError
from magnetar.storage.fileio import as_storage_error
from magnetar.storage.ledger_records import Record, pack_entry

log = logging.getLogger(__name__)

LOAD_CHUNK = 10_000  # entries read at a time while the index is rebuilt
READ_CHUNK = 1000  # entries asked of the engine at a time by checks

Stored = Callable[[BaseException | None], None]  # told an add's outcome (None: durable)


@dataclass(slots=True)
class StoredLedger:
    """What the store holds of one ledger: entry id → (local offset, base offset, count,
    publish time), the local offset being the entry's place in the engine partition."""

    ids: list[int] = field(default_factory=list)  # ascending
    rows: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    lac: int = -1  # the last add confirmed, as the writer told it (-1: never told)
    # entry id -> who else waits for the add in flight (a resend, a fence): told its end
    in_flight: dict[int, tuple[Stored, ...]] = field(default_factory=dict)
    damaged: str = ""  # what a read, check or load found wrong with this copy ("": nothing)
    failed: BaseException | None = None  # the first add that failed here since it opened

    def add(self, eid: int, local: int, base: int, count: int, ts: int) -> None:
        self.rows[eid] = (local, base, count, ts)
        if not self.ids or eid > self.ids[-1]:
            self.ids.append(eid)
        else:
            bisect.insort(self.ids, eid)

    @property
    def last(self) -> int:
        """The highest entry id held (-1: none)."""
        return self.ids[-1] if self.ids else -1

    @property
    def last_of_prefix(self) -> int:
        """The highest entry id ``n`` such that 0..n are all held (-1: not entry 0).

        ``ids`` is ascending and unique, so ``ids[i] >= i`` and ``ids[i] == i`` holds
        exactly on a prefix: a binary search finds its end.
        """
        lo, hi = 0, len(self.ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.ids[mid] == mid:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """What a read found: ``records`` from the first entry asked for on, and where it
    stopped at an entry this copy cannot give (``damaged_at``; None: it did not)."""

    records: list[Record]
    damaged_at: int | None = None


def _stored(
    ledger: StoredLedger, eid: int, entry: Entry, then: Stored, outcome: Entry | BaseException
) -> None:
    """The engine's word on the add of ``eid``: index it if stored, then tell its waiters."""
    others = ledger.in_flight.pop(eid, ())
    error = None
    if isinstance(outcome, BaseException):
        error = outcome
        if ledger.failed is None:
            ledger.failed = error
    else:  # outcome: the engine's entry, at its place in the ledger's partition
        ledger.add(eid, outcome.base_offset, entry.base_offset, entry.count, entry.publish_time)
    then(error)
    for other in others:
        other(error)


def ledger_partition(ledger_id: int) -> str:
    """The engine partition that holds the ledger's entries."""
    return f"L{ledger_id}"


class LedgerStore:
    """Ledgers of one engine, indexed by entry id. Create with :meth:`open`; the engine
    stays its opener's to close."""

    def __init__(self, engine: StorageEngine, fence_file: Path) -> None:
        self.engine = engine
        self.fence_file = fence_file
        self._ledgers: dict[int, StoredLedger] = {}
        self._fenced: set[int] = set()
        self._fence_saving = asyncio.Lock()  # one writer of the fence file at a time

    @classmethod
    async def open(cls, engine: StorageEngine, fence_file: Path) -> LedgerStore:
        """Rebuild every ledger's index from the engine and read the fences. Entries of a
        file found damaged are left out of the index, the ledger marked damaged."""
        store = cls(engine, fence_file)
        with contextlib.suppress(FileNotFoundError):
            store._fenced = set(json.loads(fence_file.read_text()))
        for name in engine.partitions():
            if name.startswith("L") and name[1:].isdigit():
                await store._load(int(name[1:]), name)
        return store

    async def _load(self, ledger_id: int, name: str) -> None:
        ledger = self._ledgers.setdefault(ledger_id, StoredLedger())
        offset = self.engine.start_offset(name)
        while offset < self.engine.end_offset(name):
            try:
                got = await self.engine.read_rows(name, offset, LOAD_CHUNK)
            except CorruptionError as err:
                # the entries of this file from the damage to the next one that reads are
                # not indexed: reads of them find the ledger damaged, and a repair replaces
                # the whole copy
                ledger.damaged = ledger.damaged or str(err)
                log.warning("ledger store: ledger %d: %s", ledger_id, err)
                offset = await self.engine.next_readable(name, offset)
                continue
            if not got:
                break
            for local, eid, base, count, ts in got:
                ledger.add(eid, local, base, count, ts)
            offset = got[-1][0] + 1

    def _segment_end(self, name: str, offset: int) -> int:
        """The end offset of the engine segment holding ``offset`` (where loading resumes)."""
        for info in self.engine.segments(name):
            if info.first_offset <= offset < info.end_offset:
                return info.end_offset
        return self.engine.end_offset(name)

    # -- what is held -------------------------------------------------------------------

    def ledger(self, ledger_id: int) -> StoredLedger | None:
        return self._ledgers.get(ledger_id)

    def __len__(self) -> int:
        return len(self._ledgers)

    def is_fenced(self, ledger_id: int) -> bool:
        return ledger_id in self._fenced

    def last_confirmed(self, ledger_id: int) -> tuple[int, int] | None:
        """(the last add confirmed as the writer told it, the highest entry id held), -1
        for none; None for a ledger not held. A local writer, which tells no lac, reads
        :attr:`StoredLedger.last_of_prefix` instead."""
        ledger = self._ledgers.get(ledger_id)
        return None if ledger is None else (ledger.lac, ledger.last)

    def skipped_at_load(self, ledger_id: int) -> bool:
        """Whether entries of the ledger's files could not be indexed (damage met at load)."""
        name = ledger_partition(ledger_id)
        indexed = len(self._ledgers[ledger_id].rows)
        return indexed < self.engine.end_offset(name) - self.engine.start_offset(name)

    # -- writes -------------------------------------------------------------------------

    async def create(self, ledger_id: int) -> None:
        """Make the ledger's partition now (idempotent; durable when this returns), so the
        adds that follow reach the engine in call order with no wait before it."""
        self._ledgers.setdefault(ledger_id, StoredLedger())
        try:
            await self.engine.create_partition(ledger_partition(ledger_id))
        except OSError as e:
            raise as_storage_error(e, f"creating ledger {ledger_id}") from e

    async def add(
        self, ledger_id: int, record: Record, *, lac: int = -1, recovery: bool = False
    ) -> None:
        """Store ``record`` as its entry of the ledger; durable when this returns (under
        the engine's fsync policy). A resend of an entry held is answered at once. Raises
        FencedError on a fenced ledger unless ``recovery`` (a recoverer's write-back), and
        what the engine raises (nothing of the entry is then stored). Cancelling the call
        stops only the wait: the entry is stored (or fails) all the same."""
        if ledger_id in self._fenced and not recovery:
            raise FencedError(f"ledger {ledger_id} is fenced")
        name = ledger_partition(ledger_id)
        if not self.engine.has_partition(name):
            await self.engine.create_partition(name)  # an add that precedes create()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.start(ledger_id, record, functools.partial(resolve, done), lac=lac, recovery=recovery)
        await done

    def start(
        self,
        ledger_id: int,
        record: Record,
        then: Stored,
        *,
        lac: int = -1,
        recovery: bool = False,
    ) -> None:
        """Start storing ``record`` now, with no wait before it reaches the engine's queue
        (adds started one after another are stored in that order; the ledger must have
        been created). ``then`` is told the outcome exactly once: None when the entry is
        durable and indexed, else the error :meth:`add` would raise. It is called at once
        for a refusal (FencedError) or a resend of an entry held, else from the engine's
        flusher (it must not block), or, for an entry already in flight, once that one
        settles."""
        self.start_entry(
            ledger_id, record.entry_id, record.entry(ledger_id), then, lac=lac, recovery=recovery
        )

    def start_entry(
        self,
        ledger_id: int,
        entry_id: int,
        entry: Entry,
        then: Stored,
        *,
        lac: int = -1,
        recovery: bool = False,
    ) -> None:
        """:meth:`start` for the record of ``entry`` as ``entry_id``, packed straight from
        the entry (the same bytes; a local writer's add)."""
        if ledger_id in self._fenced and not recovery:
            then(FencedError(f"ledger {ledger_id} is fenced"))
            return
        eid = entry_id
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = StoredLedger()
        if lac > ledger.lac:
            ledger.lac = lac
        if eid in ledger.rows:  # a resend: already durable here
            then(None)
            return
        waiting = ledger.in_flight.get(eid)
        if waiting is not None:  # a resend of an add in flight: told when it ends
            ledger.in_flight[eid] = (*waiting, then)
            return
        ledger.in_flight[eid] = ()
        # a partial, not a closure: one object per add less for the garbage collector
        stored = functools.partial(_stored, ledger, eid, entry, then)
        try:
            self.engine.submit(
                ledger_partition(ledger_id),
                pack_entry(eid, entry),
                stored,
                publish_time=entry.publish_time,
                event_time=entry.event_time,
                fmt=entry.format,
            )
        except Exception as e:  # refused before anything was queued
            stored(e)

    async def fence(self, ledger_id: int) -> StoredLedger | None:
        """Fence the ledger: adds accepted before finish first, the flag is on disk when
        this returns. Returns what is held of the ledger (None: nothing)."""
        if ledger_id not in self._fenced:
            self._fenced.add(ledger_id)
            ledger = self._ledgers.get(ledger_id)
            if ledger is not None and ledger.in_flight:  # accepted before the fence
                await asyncio.wait([self._ended(ledger, eid) for eid in ledger.in_flight])
            # fences of several ledgers at once (a new owner recovers every topic of a
            # bundle together) each rewrite the whole file: one at a time, or two writers of
            # the same temporary file fail each other
            async with self._fence_saving:
                await asyncio.to_thread(self._save_fences)
        return self._ledgers.get(ledger_id)

    @staticmethod
    def _ended(ledger: StoredLedger, eid: int) -> asyncio.Future[None]:
        """A future done when the add of ``eid`` in flight ends, however it ends."""
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ledger.in_flight[eid] += (lambda error: resolve(ended, None),)
        return ended

    def _save_fences(self) -> None:
        tmp = self.fence_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(sorted(self._fenced), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.fence_file)
        fd = os.open(self.fence_file.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    async def seal(self, ledger_id: int) -> None:
        """The ledger takes no more entries here: its engine file is closed (a closed file
        found damaged later fails the reads of its entries, where damage in an open one
        stops the engine from opening at all). Durable when this returns."""
        name = ledger_partition(ledger_id)
        if self.engine.has_partition(name):
            try:
                await self.engine.roll(name)
            except OSError as e:
                raise as_storage_error(e, f"closing ledger {ledger_id}") from e

    async def delete(self, ledger_id: int) -> None:
        """Delete the ledger's entries and its fence; durable when this returns."""
        self._ledgers.pop(ledger_id, None)
        name = ledger_partition(ledger_id)
        if self.engine.has_partition(name):
            await self.engine.delete_partition(name)
        if ledger_id in self._fenced:
            self._fenced.discard(ledger_id)
            async with self._fence_saving:
                await asyncio.to_thread(self._save_fences)

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, ledger_id: int, first: int, last: int, max_bytes: int
    ) -> LedgerRead | None:
        """Records ``first``, ``first + 1``, … while the store holds them, up to ``last``
        and about ``max_bytes`` of payload (at least one record). None when ``first`` is
        not held and the ledger is not known damaged."""
        got = await self.read_entries(ledger_id, first, last, max_bytes)
        if got is None:
            return None
        entries, damaged_at = got
        return LedgerRead([Record.of(first + i, e) for i, e in enumerate(entries)], damaged_at)

    async def read_entries(
        self, ledger_id: int, first: int, last: int, max_bytes: int
    ) -> tuple[list[Entry], int | None] | None:
        """As :meth:`read`, the entries themselves (of segment ``ledger_id``), the first
        being entry ``first``: the local reader's path, with no record in between. Also
        the entry id where a read stopped at damage (None: it did not)."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return None
        if first not in ledger.rows:
            return ([], first) if ledger.damaged else None
        name, size, eid = ledger_partition(ledger_id), 0, first
        out: list[Entry] = []
        while eid <= last and eid in ledger.rows and size < max_bytes:
            try:  # as many as max_bytes allows in one go: the reader thread makes them
                got = await self.engine.read_ledger(
                    name, ledger.rows[eid][0], (eid, last), max_bytes - size, ledger_id
                )
            except CorruptionError as err:
                ledger.damaged = str(err)
                return out, eid
            if not got:
                break
            out += got
            eid += len(got)
            if eid > last:
                break  # the usual: all asked for in one go (no need to count their bytes)
            size += sum(len(e.payload) for e in got)
        if ledger.damaged and eid <= last and eid not in ledger.rows and size < max_bytes:
            # stopped at an entry lost to the damage met at load: say so, so the reader
            # counts it and has the copy repaired
            return out, eid
        return out, None

    async def read_records(self, ledger_id: int, eids: list[int]) -> list[Record]:
        """The records of ``eids`` (all held), in that order."""
        ledger = self._ledgers[ledger_id]
        name, out = ledger_partition(ledger_id), []
        local = [ledger.rows[eid][0] for eid in eids]
        i = 0
        while i < len(local):
            run = 1  # entries stored one after another are read in one call
            while i + run < len(local) and local[i + run] == local[i] + run:
                run += 1
            got = await self.engine.read(name, local[i], max_entries=run, max_bytes=64 << 20)
            if not got:
                raise StorageError(f"ledger {ledger_id}: entry {eids[i]} vanished")
            out += [Record.unpack(e.payload) for e in got[:run]]
            i += len(got[:run])
        return out

    async def check(self, ledger_id: int) -> dict[str, object] | None:
        """Read every entry held of the ledger, verifying each checksum (a scrub):
        ``{"entries": held, "damaged": [entry ids unreadable here], "problem": text}``;
        None for a ledger not held."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return None
        name, damaged = ledger_partition(ledger_id), []
        by_local = sorted((row[0], eid) for eid, row in ledger.rows.items())
        i = 0
        while i < len(by_local):
            local, eid = by_local[i]
            try:
                got = await self.engine.read(
                    name, local, max_entries=READ_CHUNK, max_bytes=16 << 20
                )
            except CorruptionError as err:
                ledger.damaged = ledger.damaged or str(err)
                damaged.append(eid)
                i += 1
                continue
            matched = 0
            for e in got:
                if i >= len(by_local) or e.base_offset != by_local[i][0]:
                    break
                if Record.unpack(e.payload[:64]).entry_id != by_local[i][1]:
                    break
                i, matched = i + 1, matched + 1
            if not matched:  # not the entry the index names: unreadable as this entry
                damaged.append(eid)
                i += 1
        if not damaged and ledger.damaged and not self.skipped_at_load(ledger_id):
            ledger.damaged = ""  # what a read met was repaired since
        return {"entries": len(ledger.rows), "damaged": sorted(damaged), "problem": ledger.damaged}
