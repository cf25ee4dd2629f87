"""Local storage: the managed ledger's ``LedgerStorage`` of one process (standalone).

Writes go through the managed ledger's writer, as in a cluster: it assigns offsets and
entry ids, rolls segments and keeps each partition's segment list in the metadata store
(:class:`~magnetar.ledger.segmented.SegmentedStorage`). Its segments are ledgers of this
process's own :class:`~magnetar.storage.ledger_store.LedgerStore`
(:class:`~magnetar.ledger.local_segments.LocalSegments`): one engine, one journal, so one
fsync makes a burst durable across every partition. This class adds what is local: the
entry index read from the store, reads that name the damaged file, checks, and the roll
of segments that grew old without an append.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.config import Settings
from magnetar.core.entries import Entry
from magnetar.ledger.local_segments import LocalSegments
from magnetar.ledger.segment_storage import RolloverPolicy
from magnetar.ledger.segmented import Index, SegmentedStorage
from magnetar.ledger.upgrade import needs_upgrade, upgrade
from magnetar.meta import MetadataStore
from magnetar.storage import (
    EngineStats,
    SegmentInfo,
    SegmentState,
    StorageEngine,
    StorageSettings,
)
from magnetar.storage.errors import CorruptionError, StorageError
from magnetar.storage.ledger_store import LedgerStore
from magnetar.storage.tail_cache import CacheBudget

log = logging.getLogger(__name__)

FENCE_FILE = "fenced.json"


class LocalStorage(SegmentedStorage):
    """``LedgerStorage`` over this process's own disk. Create with :meth:`open`; it owns
    its engine and closes it in :meth:`aclose`."""

    segment_storage: LocalSegments

    def __init__(
        self,
        engine: StorageEngine,
        store: LedgerStore,
        meta: MetadataStore,
        clock: Clock,
        policy: RolloverPolicy,
        tail_bytes: int,
    ) -> None:
        # the partitions' tails share the node's budget (tail_cache_bytes); the engine
        # beneath keeps no cache of its own (see _engine_settings)
        self.tail_budget = CacheBudget(tail_bytes)
        super().__init__(
            meta,
            clock,
            LocalSegments(store),
            policy,
            tails=self.tail_budget.cache,
            eager=True,
        )
        self.engine = engine
        self.store = store
        self._ager: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, settings: Settings, meta: MetadataStore, *, clock: Clock = SYSTEM_CLOCK
    ) -> LocalStorage:
        """Open (and recover) the engine and its ledgers; every acknowledged entry is
        readable once a partition is opened (``create_partition``)."""
        engine = await StorageEngine.open(_engine_settings(settings), meta, clock=clock)
        try:
            store = await LedgerStore.open(engine, settings.ledger_path / FENCE_FILE)
        except BaseException:
            await engine.aclose()
            raise
        try:
            if needs_upgrade(engine):
                log.warning(
                    "%s holds partitions in the storage engine's layout: upgrading them to "
                    "the managed ledger's (one copy of the local data; progress below)",
                    settings.data_dir,
                )
                await upgrade(engine, store, meta)
        except BaseException:
            await engine.aclose()
            raise
        policy = RolloverPolicy(
            settings.segment_max_bytes, settings.segment_max_entries, settings.segment_max_age
        )
        storage = cls(engine, store, meta, clock, policy, settings.tail_cache_bytes)
        if policy.max_age_s > 0:
            storage._ager = asyncio.create_task(storage._age_loop(), name="magnetar-ager")
        return storage

    # -- what the engine tells --------------------------------------------------------

    @property
    def ledger_dir(self) -> Path:
        return self.engine.ledger_dir

    @property
    def stats(self) -> EngineStats:
        """The engine's counters (journal, fsyncs, disk full, tail cache)."""
        return self.engine.stats

    def count_tail_hit(self) -> None:
        """Counted as the engine's cache hits: a read served from memory (a read the
        partition's tail misses is counted by the engine, from its cache or a file)."""
        self.engine.stats.cache_hits += 1

    @property
    def cache_budget(self) -> CacheBudget:
        """The budget of the partitions' tails (the node's tail cache)."""
        return self.tail_budget

    @property
    def files(self) -> Any:
        return self.engine.files

    def damaged_segments(self) -> int:
        """How many segments of this node are known to be damaged."""
        return sum(len(self.damaged(name)) for name in self.partitions())

    # -- reads --------------------------------------------------------------------------

    async def index(self, info: SegmentInfo) -> Index:
        """The store's rows, read in place when every entry of the segment is held (the
        usual: no copy, nothing to build at a first read); else a copy in which an entry
        lost to damage (no row) gets the end offset of the one before it, as a replicated
        index does, so that a read there meets the damage."""
        last = info.entries - 1
        held = self.store.ledger(info.segment_id)
        rows = held.rows if held is not None else {}
        if held is not None and held.last_of_prefix >= last:
            return _Column(rows, 1, last + 1), _Column(rows, 3, last + 1)
        bases, times = array.array("q"), array.array("q")
        end, ts = info.first_offset, info.first_publish_time
        for eid in range(last + 1):
            row = rows.get(eid)
            if row is not None:
                _, end, count, ts = row
                bases.append(end)
                end += count
            else:
                bases.append(end)
            times.append(ts)
        return bases, times

    async def read_entries(
        self, info: SegmentInfo, first: int, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        sid = info.segment_id
        last = min(info.entries - 1, first + max_entries - 1)
        if first > last:
            return []
        got = await self.store.read_entries(sid, first, last, max_bytes)
        if got is not None and got[0]:
            return got[0]
        held = self.store.ledger(sid)
        problem = held.damaged if held is not None and held.damaged else "it is not stored"
        raise EntryDamagedError(self.ledger_dir, sid, first, problem)

    # -- damage -------------------------------------------------------------------------

    def damaged(self, name: str) -> dict[int, str]:
        out = {}
        for info in self.segments(name):
            held = self.store.ledger(info.segment_id)
            if info.local and held is not None and held.damaged:
                out[info.segment_id] = held.damaged
        return out

    async def check(self, name: str, *, repair: bool = False) -> list[dict[str, Any]]:
        """Read and verify every stored entry: a row per segment. ``repair`` changes
        nothing here: a segment has one copy, restored from a backup."""
        rows: list[dict[str, Any]] = []
        for info in self.segments(name):
            row: dict[str, Any] = {"segmentId": info.segment_id, "state": info.state.value}
            if info.state is SegmentState.DELETED or not info.local:
                rows.append({**row, "entries": info.entries, "error": "", "local": False})
                continue
            found = await self.store.check(info.segment_id)
            held = found["entries"] if found is not None else 0
            damaged = found["damaged"] if found is not None else []
            error = ""
            if damaged or (isinstance(held, int) and held < info.entries):
                problem = found["problem"] if found is not None else "not stored"
                error = f"entries {damaged or 'missing'} of segment {info.segment_id} " + (
                    f"cannot be read: {problem}"
                )
            rows.append({**row, "entries": held, "error": error, "local": True})
        return rows

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        """Always None: one process's segments are read through its own Flight endpoint."""
        return None

    # -- age ----------------------------------------------------------------------------

    async def _age_loop(self) -> None:
        """Close open segments older than the age limit even without appends, so an idle
        topic's data reaches retention and offload."""
        tick = min(1.0, self.policy.max_age_s / 4)
        while True:
            await asyncio.sleep(tick)
            for part in self.served():
                self.roll_if_full(part)

    # -- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every open segment at its end (no recovery at the next open), then the
        engine."""
        if self._ager is not None:
            self._ager.cancel()
            with contextlib.suppress(BaseException):
                await self._ager
        await self.close_all()
        await self.engine.aclose()


class EntryDamagedError(CorruptionError):
    """An acknowledged entry of a local segment cannot be read (its bytes are damaged)."""

    def __init__(self, ledger_dir: Path, segment: int, entry: int, problem: str) -> None:
        StorageError.__init__(self, f"entry {entry} of segment {segment} cannot be read: {problem}")
        self.path = str(ledger_dir)
        self.position = 0


def _engine_settings(settings: Settings) -> StorageSettings:
    """The engine under the ledgers rolls its files by size only (segments are the
    writer's, and an idle ledger needs no roll of its own) and caches nothing: the
    partitions' tails above it hold the newest entries, within the node's budget."""
    base = StorageSettings.of(settings)
    return dataclasses.replace(base, segment_max_age=0, segment_max_entries=0, tail_cache_bytes=0)


class _Column(Sequence[int]):
    """Field ``at`` of a ledger's rows (entry id → row) for entry ids 0..length-1, read in
    place: the index of a segment whose every entry is held."""

    __slots__ = ("_at", "_length", "_rows")

    def __init__(self, rows: dict[int, tuple[int, int, int, int]], at: int, length: int) -> None:
        self._rows, self._at, self._length = rows, at, length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, eid: int) -> int: ...

    @overload
    def __getitem__(self, eid: slice) -> list[int]: ...

    def __getitem__(self, eid: int | slice) -> int | list[int]:
        ids = range(self._length)[eid]  # IndexError past the end, as a list's
        if isinstance(ids, range):
            return [self._rows[i][self._at] for i in ids]
        return self._rows[ids][self._at]

    def __iter__(self) -> Iterator[int]:
        return (self._rows[i][self._at] for i in range(self._length))
