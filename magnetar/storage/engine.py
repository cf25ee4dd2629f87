"""The storage engine: BookKeeper's role in Magnetar (seed 004).

Write path: :meth:`StorageEngine.append` queues an entry; the flusher task takes every
queued entry at once, numbers them (continuous offsets per partition), writes them to the
journal, fsyncs once for all of them (group commit), copies them into their partitions'
open segment files, and only then acknowledges. Segment files are fsynced at checkpoints,
which also retire journal files.

Read path: recent entries come from each partition's tail cache; older ones from segment
files through the sparse indexes, on reader threads that never wait for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.config import check_writable
from magnetar.core.entries import Entry
from magnetar.core.errors import ClosedError, MagnetarError
from magnetar.core.futures import resolve
from magnetar.core.metrics import SIZE_BOUNDS, Histogram
from magnetar.meta import MetadataStore
from magnetar.storage import catalog
from magnetar.storage.config import StorageSettings
from magnetar.storage.errors import (
    DiskFullError,
    PartitionNotFoundError,
    SegmentChangedError,
    StorageError,
    WriteFailedError,
)
from magnetar.storage.fileio import as_storage_error, fsync_dir, writev_all
from magnetar.storage.journal import Journal, remove_before
from magnetar.storage.ledger_records import Row, entries_of, row_of
from magnetar.storage.open_files import OpenFiles, segment_file_cap
from magnetar.storage.partition import PartitionLog
from magnetar.storage.records import check_header_fields, encode_header, journal_prefix
from magnetar.storage.recovery import recover
from magnetar.storage.segment import Segment, SegmentInfo, SegmentState
from magnetar.storage.tail_cache import CacheBudget

log = logging.getLogger(__name__)


@dataclass(slots=True)
class EngineStats:
    flushes: int = 0  # group commits: one journal write (+ fsync under fsync=always) each
    fsyncs: int = 0
    entries: int = 0
    bytes: int = 0
    rolls: int = 0
    checkpoints: int = 0
    journal_files_removed: int = 0
    disk_full: bool = False  # the last append failed for want of space
    disk_full_episodes: int = 0
    recovery_cut_bytes: int = 0  # torn tails cut at the last start (journal and segments)
    recovery_cut_records: int = 0
    cache_hits: int = 0  # reads served from the tail cache
    cache_misses: int = 0  # reads of stored entries that went to segment files
    fsync_latency: Histogram = field(default_factory=Histogram)  # seconds per journal fsync
    # appends per group commit (one journal write, one fsync)
    group_commit_entries: Histogram = field(default_factory=lambda: Histogram(SIZE_BOUNDS))


Settle = Callable[[Entry | BaseException], None]


@dataclass(slots=True)
class _Pending:
    partition: PartitionLog
    payload: bytes
    count: int
    publish_time: int
    event_time: int
    fmt: int
    then: Settle  # told the outcome once, from the flusher (see StorageEngine.submit)
    settled: bool = False

    def settle(self, outcome: Entry | BaseException) -> None:
        if self.settled:
            return
        self.settled = True
        try:
            self.then(outcome)
        except Exception:
            # the caller's bookkeeping failed: its bug, never the flusher's or the group's
            log.exception("the completion of an append to %s failed", self.partition.name)


@dataclass(slots=True)
class _Numbered:
    """One queued append with its offset and encoded header."""

    pending: _Pending
    base: int
    header: bytes


@dataclass(slots=True)
class _Run:
    """The appends of one group that go into segments together. The first run fills the
    open segments; each later one follows a roll of the segments it goes to, so no segment
    grows more than one entry past its limit however large the group."""

    items: list[_Numbered] = field(default_factory=list)

    def journal_buffers(self) -> list[bytes]:
        out: list[bytes] = []
        for n in self.items:
            out += (journal_prefix(n.pending.partition.partition_id, n.header), n.header)
            out.append(n.pending.payload)
        return out


@dataclass(slots=True)
class _Batch:
    """One run placed in the open segments: every buffer to write, and what to do after."""

    segments: dict[Segment, list[bytes]] = field(default_factory=dict)
    sizes: dict[Segment, int] = field(default_factory=dict)
    done: list[tuple[_Pending, Segment, Entry, int]] = field(default_factory=list)


class StorageEngine:
    """Partitions of entries, durable on acknowledgement. Create with :meth:`open`."""

    def __init__(self, settings: StorageSettings, meta: MetadataStore, clock: Clock) -> None:
        self.settings = settings
        self.meta = meta
        self.clock = clock
        self.journal_dir = settings.journal_path
        self.ledger_dir = settings.ledger_path
        self.stats = EngineStats()
        self.cache_budget = CacheBudget(settings.tail_cache_bytes)
        self.files = OpenFiles(segment_file_cap(settings.max_open_segment_files))
        self._partitions: dict[str, PartitionLog] = {}
        self._journal: Journal | None = None
        self._pending: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._io_lock = asyncio.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="magnetar-journal")
        self._readers = ThreadPoolExecutor(2, thread_name_prefix="magnetar-read")
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._dirty: set[PartitionLog] = set()

    @classmethod
    async def open(
        cls, settings: StorageSettings, meta: MetadataStore, *, clock: Clock = SYSTEM_CLOCK
    ) -> StorageEngine:
        """Open (and recover) the engine. Everything acknowledged before a crash is readable
        when this returns; a torn, unacknowledged tail is cut; damage inside acknowledged
        data raises :class:`CorruptionError` naming the file and position."""
        check_writable("journal_dir", settings.journal_path)
        check_writable("ledger_dir", settings.ledger_path)
        engine = cls(settings, meta, clock)
        try:
            state = await recover(settings, meta, clock, engine.cache_budget, engine.files)
        except BaseException:
            engine.files.close_all()
            engine._shutdown_threads()
            raise
        engine._partitions = {p.name: p for p in state.partitions}
        engine.stats.recovery_cut_records = len(state.cut)
        engine.stats.recovery_cut_bytes = sum(t.bytes for t in state.cut)
        engine._journal = state.journal
        engine._start_tasks()
        return engine

    def _start_tasks(self) -> None:
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="magnetar-flusher"))
        policy = self.settings.fsync
        if policy.mode == "interval":
            self._tasks.append(asyncio.create_task(self._sync_loop(policy.interval_ms / 1000)))
        if self.settings.segment_max_age > 0:
            self._tasks.append(asyncio.create_task(self._age_loop()))

    # -- partitions ---------------------------------------------------------------------

    async def create_partition(self, name: str) -> None:
        """Create an empty partition (idempotent). Durable when this returns."""
        self._check_open()
        if name in self._partitions:
            return
        async with self._io_lock:
            if name in self._partitions:
                return
            cache = self.cache_budget.cache()
            part = await catalog.create_partition(self.meta, self.settings, name, cache, self.files)
            await catalog.new_segment(self.meta, self.settings, part, self.clock)
            self._partitions[name] = part

    async def delete_partition(self, name: str) -> None:
        """Delete a partition and all its data. Durable when this returns."""
        part = self._part(name)
        async with self._io_lock:
            del self._partitions[name]
            self._dirty.discard(part)
            await catalog.delete_partition(self.meta, part)
            await asyncio.get_running_loop().run_in_executor(self._writer, _remove_files, part)

    async def trim(self, name: str, before: int) -> list[SegmentInfo]:
        """Delete every closed segment whose messages all lie before offset ``before``.

        Only a prefix of the log goes: the open segment and an OFFLOADING one (and every
        segment after it) are kept. Returns the deleted segments' records. Readers positioned
        in a deleted segment get OffsetOutOfRangeError (never a missing-file error).
        """
        part = self._part(name)
        async with self._io_lock:
            # Only a prefix goes, stopping at an OFFLOADING segment: never a hole in the log.
            doomed = list(
                itertools.takewhile(
                    lambda s: (
                        s.info.end_offset <= before
                        and s.info.state not in (SegmentState.OPEN, SegmentState.OFFLOADING)
                    ),
                    part.segments[:-1],
                )
            )
            if not doomed:
                return []
            part.segments = [s for s in part.segments if s not in doomed]
            for seg in doomed:
                part.damaged.pop(seg.info.segment_id, None)
            for seg in doomed:
                await catalog.delete_segment(self.meta, seg)
            await asyncio.get_running_loop().run_in_executor(self._writer, _unlink_segments, doomed)
            return [dataclasses.replace(s.info, state=SegmentState.DELETED) for s in doomed]

    async def update_segment(
        self,
        name: str,
        segment_id: int,
        *,
        expect: Callable[[SegmentInfo], bool] | None = None,
        **changes: Any,
    ) -> SegmentInfo:
        """Change a closed segment's record (state, offload details); durable on return.
        With ``expect``, only if the record satisfies it, else SegmentChangedError."""
        part = self._part(name)
        async with self._io_lock:
            seg = _find(part, segment_id)
            if seg.info.state is SegmentState.OPEN:
                raise StorageError(f"segment {segment_id} of {name} is still open")
            if expect is not None and not expect(seg.info):
                raise SegmentChangedError(f"segment {segment_id} of {name} changed meanwhile")
            await self._save_changed(seg, **changes)
            return dataclasses.replace(seg.info)

    async def _save_changed(self, seg: Segment, **changes: Any) -> None:
        """Persist a changed copy of ``seg.info``. A failed save puts the old record back, so
        memory never says what the metadata store does not."""
        before, seg.info = seg.info, dataclasses.replace(seg.info, **changes)
        try:
            await catalog.save_segment(self.meta, seg)
        except BaseException:
            seg.info = before
            raise

    async def drop_local_copy(self, name: str, segment_id: int) -> None:
        """Delete the local files of an OFFLOADED segment; its reads go to the tier after."""
        part = self._part(name)
        async with self._io_lock:
            seg = _find(part, segment_id)
            if seg.info.state is not SegmentState.OFFLOADED or not seg.info.local:
                raise StorageError(f"segment {segment_id} of {name} is not offloaded and local")
            await self._save_changed(seg, local=False)
            await asyncio.get_running_loop().run_in_executor(self._writer, _unlink_segments, [seg])

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None:
        part = self._part(name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.find_in_segment, segment_id, ts)

    def has_partition(self, name: str) -> bool:
        return name in self._partitions

    def partitions(self) -> list[str]:
        return sorted(self._partitions)

    def _part(self, name: str) -> PartitionLog:
        self._check_open()
        try:
            return self._partitions[name]
        except KeyError:
            raise PartitionNotFoundError(f"partition {name!r} does not exist") from None

    def end_offset(self, name: str) -> int:
        """The offset after the last acknowledged entry (the next one to be written)."""
        return self._part(name).end_offset

    def start_offset(self, name: str) -> int:
        """The first offset still stored."""
        return self._part(name).start_offset

    async def unload(self, name: str) -> None:
        """Nothing to do: one process serves its local partitions for its whole life."""

    def release(self, name: str) -> None:
        """Nothing to do: one process owns its local partitions for its whole life."""

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        """Always None: one process's segments are read through its own Flight endpoint."""
        return None

    def segments(self, name: str) -> list[SegmentInfo]:
        """Copies of the partition's segment records, oldest first."""
        return [dataclasses.replace(s.info) for s in self._part(name).segments]

    async def recorded(self, name: str, segment_id: int) -> SegmentInfo | None:
        """The segment's record (this process owns its partitions for its whole life)."""
        if name not in self._partitions:
            return None
        return next((s for s in self.segments(name) if s.segment_id == segment_id), None)

    # -- writes -------------------------------------------------------------------------

    async def append(
        self,
        name: str,
        payload: bytes,
        *,
        count: int = 1,
        publish_time: int | None = None,
        event_time: int = -1,
        fmt: int = 0,
    ) -> Entry:
        """Append one entry of ``count`` messages; returns it with its base offset.

        When this returns the entry is durable under the fsync policy (``always``: on disk)
        and readable. If it raises (DiskFullError, WriteFailedError), nothing of the entry
        is acknowledged and no later offset depends on it: retrying is safe.
        """
        fut: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self.submit(
            name,
            payload,
            functools.partial(resolve, fut),
            count=count,
            publish_time=publish_time,
            event_time=event_time,
            fmt=fmt,
        )
        return await fut

    def submit(
        self,
        name: str,
        payload: bytes,
        then: Settle,
        *,
        count: int = 1,
        publish_time: int | None = None,
        event_time: int = -1,
        fmt: int = 0,
    ) -> None:
        """Queue one entry now, as :meth:`append` does, without a future or a task: entries
        submitted one after another get offsets in that order. ``then`` is called exactly
        once, by the flusher, with the entry once :meth:`append` would return it (durable,
        readable) or with the error it would raise; it must not block, and what it raises
        is logged, never the group's concern.

        Raises at once, and queues nothing, for an entry it refuses (InvalidEntryError,
        PartitionNotFoundError, ClosedError); ``then`` is not called.
        """
        part = self._part(name)
        ts = self.clock.now_ms() if publish_time is None else publish_time
        # Checked here, never in the flusher: a value the header cannot hold must fail this
        # append alone, not the flusher task that every other append waits on.
        check_header_fields(count, ts, event_time, fmt, len(payload))
        self._pending.append(_Pending(part, payload, count, ts, event_time, fmt, then))
        self._wakeup.set()

    async def _flush_loop(self) -> None:
        while True:
            if not self._pending:
                if self._closed:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            batch, self._pending = self._pending, []
            async with self._io_lock:
                await self._flush_or_fail(batch)
                try:
                    await self._maintain({p.partition for p in batch})
                except Exception as e:
                    # A roll or checkpoint failed (disk full ...): acknowledged data is safe
                    # in the journal; appends go on and maintenance retries after the next.
                    log.error(
                        "storage maintenance failed, will retry: %s",
                        e,
                        exc_info=not isinstance(e, OSError | MagnetarError),
                    )

    async def _flush_or_fail(self, batch: list[_Pending]) -> None:
        """Flush one group; whatever goes wrong fails this group's appends and never the
        flusher, which every later append of the node waits on."""
        try:
            await self._flush(batch)
        except Exception as e:
            log.exception("an append group failed unexpectedly; its appends get the error")
            error = WriteFailedError(f"append failed: {type(e).__name__}: {e}")
            for p in batch:
                p.settle(error)

    def _plan(self, batch: list[_Pending]) -> list[_Run]:
        """Number the group's appends and split them into runs at the points where a
        partition's segment reaches its limit (size or entries) and must roll."""
        runs: list[_Run] = []
        fill: dict[PartitionLog, tuple[int, int, int]] = {}  # run, bytes, entries so far
        for p in batch:
            part = p.partition
            info = part.open_segment.info
            run, size, entries = fill.get(part, (0, info.size, info.entries))
            if entries and self._full(size, entries):
                run, size, entries = run + 1, 0, 0
            base = part.next_offset
            part.next_offset += p.count
            header = encode_header(base, p.count, p.publish_time, p.event_time, p.fmt, p.payload)
            while len(runs) <= run:
                runs.append(_Run())
            runs[run].items.append(_Numbered(p, base, header))
            fill[part] = (run, size + len(header) + len(p.payload), entries + 1)
        return runs

    def _full(self, size: int, entries: int) -> bool:
        s = self.settings
        return size >= s.segment_max_bytes or 0 < s.segment_max_entries <= entries

    @staticmethod
    def _place(run: _Run) -> _Batch:
        """Where each entry of ``run`` goes: the end of its partition's open segment."""
        plan = _Batch()
        for n in run.items:
            p, seg = n.pending, n.pending.partition.open_segment
            pos = plan.sizes.get(seg, seg.info.size)
            plan.sizes[seg] = pos + len(n.header) + len(p.payload)
            plan.segments.setdefault(seg, []).extend((n.header, p.payload))
            sid = seg.info.segment_id
            entry = Entry(n.base, p.count, p.publish_time, p.event_time, p.fmt, p.payload, sid)
            plan.done.append((p, seg, entry, pos))
        return plan

    async def _flush(self, batch: list[_Pending]) -> None:
        """Journal the whole group with one write and one fsync, then copy it run by run
        into the segments, rolling them between runs; each run is acknowledged once copied.

        A failure fails the run it hits and every later one (their journal records are cut
        and their offsets reused); the runs before stay acknowledged.
        """
        starts = {p.partition: p.partition.next_offset for p in reversed(batch)}
        try:
            runs = self._plan(batch)
        except BaseException:
            for part, start in starts.items():
                part.next_offset = start
            raise
        loop = asyncio.get_running_loop()
        position = -1  # journal position of the next run's first record
        for k, run in enumerate(runs):
            try:
                if k:
                    await self._roll_before(run)
                plan = self._place(run)
                if k == 0:
                    position = await loop.run_in_executor(self._writer, self._write, runs, plan)
                else:
                    await loop.run_in_executor(self._writer, self._copy, plan, position)
            except Exception as e:
                self._fail([n for r in runs[k:] for n in r.items], e)
                return
            self._apply(plan)
            position += sum(len(b) for b in run.journal_buffers())
        self.stats.flushes += 1
        self.stats.entries += len(batch)
        self.stats.group_commit_entries.observe(len(batch))
        if self.stats.disk_full:
            self._note_disk(None)

    async def _roll_before(self, run: _Run) -> None:
        """Roll the segments ``run`` goes to. A roll that fails is logged and the run goes
        into the old segment (it grows past its limit); the next maintenance retries."""
        for part in dict.fromkeys(n.pending.partition for n in run.items):
            if part.open_segment.info.is_empty:
                continue
            try:
                await self._roll(part)
            except Exception as e:
                log.error(
                    "rolling a segment of %s failed, appending to it meanwhile: %s",
                    part.name,
                    e,
                    exc_info=not isinstance(e, OSError | MagnetarError),
                )

    def _fail(self, failed: list[_Numbered], e: Exception) -> None:
        """Nothing of ``failed`` exists: reuse its offsets and fail its appends. A bug (not
        an OSError) is re-raised for _flush_or_fail to log."""
        for n in reversed(failed):
            n.pending.partition.next_offset = n.base  # ends at each partition's first failed
        if not isinstance(e, OSError):
            raise e
        error = as_storage_error(e, "append failed")
        self._note_disk(error)
        for n in failed:
            n.pending.settle(error)

    def _apply(self, plan: _Batch) -> None:
        """The run is in its segments: make it readable and acknowledge it."""
        caching = self.cache_budget.max_bytes > 0  # 0 under the managed ledger's tails
        for p, seg, entry, pos in plan.done:
            seg.on_appended(entry, pos)
            if caching:
                p.partition.cache.add(entry)
            p.partition.end_offset = entry.next_offset
            self._dirty.add(p.partition)
            p.settle(entry)

    def _note_disk(self, error: Exception | None) -> None:
        """Log a disk-full episode once when it starts (with the free space) and once when
        writes succeed again; stats say whether one is going on."""
        full = isinstance(error, DiskFullError)
        if full == self.stats.disk_full:
            return
        self.stats.disk_full = full
        if full:
            self.stats.disk_full_episodes += 1
            log.error(
                "disk full: appends fail until space is freed (journal %s: %s free; "
                "ledgers %s: %s free)",
                self.journal_dir,
                _free(self.journal_dir),
                self.ledger_dir,
                _free(self.ledger_dir),
            )
        else:
            log.warning("disk space is back: appends succeed again")

    def _write(self, runs: list[_Run], first: _Batch) -> int:
        """On the writer thread: journal every run, fsync once, then copy the first run into
        its segments; all or nothing. Returns where the group starts in the journal."""
        journal = self._journal
        assert journal is not None
        start = journal.write([b for run in runs for b in run.journal_buffers()])
        try:  # any failure, not only an OSError, takes the group back off the journal
            if self.settings.fsync.mode == "always":
                self._sync(journal)
            self._copy(first, start)
        except BaseException:
            journal.truncate(start)
            raise
        self.stats.bytes += journal.size - start
        return start

    def _copy(self, plan: _Batch, position: int) -> None:
        """On the writer thread: copy one run into its segments. On any failure the segments
        and the journal (from ``position``, where the run starts) are cut back, and it raises."""
        written: list[tuple[Segment, int]] = []
        try:
            for seg, buffers in plan.segments.items():
                written.append((seg, seg.info.size))
                with seg.writing() as fd:
                    writev_all(fd, buffers)
        except BaseException:
            for seg, size in written:
                os.truncate(seg.path, size)
            assert self._journal is not None
            self._journal.truncate(position)
            raise

    async def _sync_loop(self, interval: float) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            await asyncio.sleep(interval)
            if self._journal is not None:
                await loop.run_in_executor(self._writer, self._sync, self._journal)

    def _sync(self, journal: Journal) -> None:
        """On the writer thread (the latency histogram's one writer): fsync, timed."""
        started = time.perf_counter()
        journal.sync()
        self.stats.fsync_latency.observe(time.perf_counter() - started)
        self.stats.fsyncs += 1

    # -- segment rollover and checkpoints -----------------------------------------------

    def _should_roll(self, part: PartitionLog) -> bool:
        s, info = self.settings, part.open_segment.info
        if info.is_empty:
            return False
        if self._full(info.size, info.entries):
            return True
        age = (self.clock.now_ms() - info.created_ms) / 1000
        return bool(s.segment_max_age) and age >= s.segment_max_age

    async def _maintain(self, touched: Iterable[PartitionLog]) -> None:
        for part in touched:
            if self._should_roll(part):
                await self._roll(part)
        assert self._journal is not None
        if self._journal.size >= self.settings.journal_max_bytes:
            await self._checkpoint(rotate=True)

    async def _roll(self, part: PartitionLog) -> None:
        seg = part.open_segment
        await asyncio.get_running_loop().run_in_executor(self._writer, seg.seal)
        seg.info.state = SegmentState.CLOSED
        seg.info.closed_ms = self.clock.now_ms()
        try:
            await catalog.save_segment(self.meta, seg)
            # Mid-group the partition's next offset lies further on: start where seg ends.
            await catalog.new_segment(
                self.meta, self.settings, part, self.clock, first_offset=seg.info.end_offset
            )
        except BaseException:
            if part.open_segment is seg:  # no successor: keep appending here, retry later
                seg.info.state, seg.info.closed_ms = SegmentState.OPEN, 0
                with contextlib.suppress(Exception):
                    await catalog.save_segment(self.meta, seg)
            raise
        seg.finish_seal()
        self._dirty.discard(part)
        self.stats.rolls += 1

    async def roll(self, name: str) -> bool:
        """Close the open segment now (if it holds anything); False if it was empty."""
        part = self._part(name)
        async with self._io_lock:
            if part.open_segment.info.is_empty:
                return False
            await self._roll(part)
            return True

    async def _age_loop(self) -> None:
        tick = min(1.0, self.settings.segment_max_age / 4)
        while not self._closed:
            await asyncio.sleep(tick)
            due = [p for p in self._partitions.values() if self._should_roll(p)]
            if due:
                async with self._io_lock:
                    for part in due:
                        if self._should_roll(part):
                            await self._roll(part)

    async def checkpoint(self) -> None:
        """Make every acknowledged entry safe in segment files and retire old journal files."""
        self._check_open()
        async with self._io_lock:
            await self._checkpoint(rotate=True)

    async def _checkpoint(self, *, rotate: bool) -> None:
        dirty = set(self._dirty)

        def sync_all() -> dict[int, int]:
            assert self._journal is not None
            if rotate:
                self._journal = self._journal.rotate()
            synced = {}
            for part in dirty:
                with part.open_segment.writing() as fd:
                    os.fsync(fd)
            for part in self._partitions.values():
                synced[part.open_segment.info.segment_id] = part.open_segment.info.size
            fsync_dir(self.ledger_dir)
            return synced

        loop = asyncio.get_running_loop()
        synced = await loop.run_in_executor(self._writer, sync_all)
        self._dirty -= dirty
        assert self._journal is not None
        number, position = self._journal.number, self._journal.size
        await loop.run_in_executor(
            self._writer, catalog.save_checkpoint, self.journal_dir, number, position, synced
        )
        removed = await loop.run_in_executor(
            self._writer, remove_before, self.journal_dir, self._journal.number
        )
        self.stats.journal_files_removed += removed
        self.stats.checkpoints += 1

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset`` on; [] when ``offset`` is at the end.

        Tail reads are served from memory; older entries from segment files on a reader
        thread. Raises OffsetOutOfRangeError before the first stored offset, and
        CorruptionError (file and position) when stored bytes fail their checksum.
        """
        part = self._part(name)
        if offset >= part.start_offset:
            cached = part.cache.read(offset, max_entries, max_bytes)
            if cached is not None:
                self.stats.cache_hits += 1
                return cached
        if offset < part.end_offset:
            self.stats.cache_misses += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.read, offset, max_entries, max_bytes)

    async def read_ledger(
        self, name: str, offset: int, eids: tuple[int, int], max_bytes: int, ledger_id: int
    ) -> list[Entry]:
        """:meth:`read` of a partition of ledger records (``magnetar.storage.ledger_records``):
        the ledger's entries ``eids`` (first, last) held one after another from ``offset``
        on, each decoded from its record once, on the reader thread."""
        part = self._part(name)
        if offset >= part.start_offset:
            cached = part.cache.read(offset, eids[1] - eids[0] + 1, max_bytes)
            if cached is not None:
                self.stats.cache_hits += 1
                return entries_of(cached, eids, max_bytes, ledger_id)
        if offset < part.end_offset:
            self.stats.cache_misses += 1
        loop = asyncio.get_running_loop()
        read = part.read_ledger
        return await loop.run_in_executor(self._readers, read, offset, eids, max_bytes, ledger_id)

    async def read_rows(self, name: str, offset: int, max_entries: int) -> list[Row]:
        """The index rows (``ledger_records.decode_row``) of a partition of ledger records
        from the entry at ``offset`` on, at most ``max_entries``, with no payload copied
        from a file: what a ledger store rebuilds its index from. Raises as :meth:`read`."""
        part = self._part(name)
        if offset >= part.start_offset:
            cached = part.cache.read(offset, max_entries, 1 << 62)
            if cached is not None:
                return [row_of(e) for e in cached]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.read_rows, offset, max_entries)

    async def check(self, name: str, *, repair: bool = False) -> list[dict[str, Any]]:
        """Verify every stored entry of the partition (see :meth:`PartitionLog.check`).
        ``repair`` changes nothing here: a segment has one copy, restored from a backup."""
        part = self._part(name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.check)

    def damaged(self, name: str) -> dict[int, str]:
        """Segments of the partition found damaged (by a read or a check): id -> problem."""
        return dict(self._part(name).damaged)

    async def next_readable(self, name: str, offset: int) -> int:
        """The first offset after damage at ``offset`` that reads (see
        :meth:`PartitionLog.next_readable`)."""
        part = self._part(name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.next_readable, offset)

    def damaged_segments(self) -> int:
        """How many segments of this node are known to be damaged."""
        return sum(len(p.damaged) for p in self._partitions.values())

    async def find_offset(self, name: str, ts: int) -> int:
        """The first offset whose publish time is >= ``ts`` (the end offset if none)."""
        part = self._part(name)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, part.find_offset, ts)

    # -- lifecycle ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the storage engine is closed")

    async def aclose(self) -> None:
        """Flush what is queued, checkpoint, and release files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        for task in self._tasks[1:]:
            task.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._tasks)
            async with self._io_lock:
                await self._checkpoint(rotate=False)
        finally:
            assert self._journal is not None
            self._journal.close()
            for part in self._partitions.values():
                part.close()
            self._shutdown_threads()
            self.files.close_all()

    def _shutdown_threads(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)

    async def __aenter__(self) -> StorageEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _find(part: PartitionLog, segment_id: int) -> Segment:
    for seg in part.segments:
        if seg.info.segment_id == segment_id:
            return seg
    raise StorageError(f"segment {segment_id} of {part.name} does not exist")


def _unlink_segments(segments: list[Segment]) -> None:
    for seg in segments:
        seg.close()
        for suffix in (".log", ".index", ".timeindex"):
            seg.path.with_suffix(suffix).unlink(missing_ok=True)


def _remove_files(part: PartitionLog) -> None:
    _unlink_segments(part.segments)
    part.close()
    with contextlib.suppress(OSError):
        part.directory.rmdir()


__all__ = ["EngineStats", "StorageEngine"]


def _free(path: Path) -> str:
    try:
        return f"{shutil.disk_usage(path).free / (1 << 20):.1f} MiB"
    except OSError as e:
        return f"unknown ({e.strerror})"
