"""A ``LedgerStorage`` made of one segment writer per partition: what local and replicated
storage share.

Each partition this process serves has a :class:`~magnetar.ledger.writer.SegmentWriter`
(offsets, entry ids, rollover, the segment list in the metadata store) over one
:class:`~magnetar.ledger.segment_storage.SegmentStorage`, and a tail of its newest
confirmed entries in memory. Reads by offset find the segment in the writer's list and the
entry in the segment's index (entry id → base offset, publish time), which each kind of
storage keeps its own way; so does it check copies and say where a reader may fetch a
closed segment itself. Local storage (``magnetar.ledger.local_storage``) and replicated
storage (``magnetar.cluster.replicated``) are the two kinds.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from magnetar.core.clock import Clock
from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import RolloverPolicy, SegmentStorage
from magnetar.ledger.writer import SegmentIds, SegmentWriter, recorded_segment
from magnetar.meta import MetadataStore
from magnetar.storage import OffsetOutOfRangeError, SegmentInfo, SegmentState
from magnetar.storage.errors import PartitionNotFoundError, SegmentNotLocalError, StorageError

log = logging.getLogger(__name__)

TAIL_BYTES = 32 << 20  # confirmed entries kept per partition for tail reads

Index = tuple[Sequence[int], Sequence[int]]  # base offsets, publish times, by entry id


class TailLike(Protocol):
    """A partition's newest confirmed entries in memory."""

    def add(self, entry: Entry) -> None: ...

    def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Entry] | None:
        """Entries from the one holding ``offset``; None when it is not held."""
        ...


class Served:
    """A partition this process writes: its writer and the tail of confirmed entries."""

    def __init__(self, writer: SegmentWriter, tail: TailLike) -> None:
        self.writer = writer
        self.tail = tail
        self.rolling: asyncio.Task[None] | None = None  # the eager roll of a full segment


class SegmentedStorage:
    """The partitions, appends, reads by offset and by time, and segment-list changes of a
    ``LedgerStorage`` over :class:`SegmentWriter`; a subclass says how a segment's entries
    are indexed and read (:meth:`index`, :meth:`read_entries`)."""

    def __init__(
        self,
        meta: MetadataStore,
        clock: Clock,
        segment_storage: SegmentStorage,
        policy: RolloverPolicy,
        *,
        tail_bytes: int = TAIL_BYTES,
        tails: Callable[[], TailLike] | None = None,
        eager: bool = False,
    ) -> None:
        self.meta = meta
        self.clock = clock
        self.segment_storage = segment_storage
        self.policy = policy
        self.ids = SegmentIds(meta)
        self.tail_bytes = tail_bytes
        # a new partition's tail: its own budget of tail_bytes unless a shared one is given
        self.tails: Callable[[], TailLike] = tails or (lambda: Tail(tail_bytes))
        # a partition always has an open segment: made at open and as soon as the open one
        # is full, as Pulsar's managed ledger does (else at the append that needs it)
        self.eager = eager
        self.tail_hits = 0  # reads served by a partition's tail in memory
        self._parts: dict[str, Served] = {}

    # -- what a kind of storage says ----------------------------------------------------

    async def index(self, info: SegmentInfo) -> Index:
        """Base offsets and publish times of the segment's entries, by entry id (at least
        up to its last confirmed entry)."""
        raise NotImplementedError

    async def read_entries(
        self, info: SegmentInfo, first: int, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        """Entries of the segment from entry id ``first`` (at least one), never past the
        last confirmed one; CorruptionError when the first cannot be read."""
        raise NotImplementedError

    def count_tail_hit(self) -> None:
        """A read was served by a partition's tail in memory."""
        self.tail_hits += 1

    # -- partitions ---------------------------------------------------------------------

    def partitions(self) -> list[str]:
        return sorted(self._parts)

    def part(self, name: str) -> Served:
        part = self._parts.get(name)
        if part is None:
            raise PartitionNotFoundError(f"no partition {name!r}")
        return part

    def served(self) -> list[Served]:
        return list(self._parts.values())

    async def create_partition(self, name: str) -> None:
        """Open the partition (recovering its last segment if its writer died) or create it."""
        if name in self._parts:
            return
        tail = self.tails()
        writer = await SegmentWriter.open(
            name, self.segment_storage, self.meta, self.ids, self.policy, self.clock, tail.add
        )
        if self.eager:
            await writer.ensure_open()
        self._parts[name] = Served(writer, tail)

    async def delete_partition(self, name: str) -> None:
        part = self.part(name)
        del self._parts[name]
        with contextlib.suppress(Exception):
            await part.writer.delete()

    async def unload(self, name: str) -> None:
        """Close ``name``'s open segment at its end and forget it: the next owner opens it
        without recovery."""
        part = self._parts.pop(name, None)
        if part is not None:
            await part.writer.unload()

    def release(self, name: str) -> None:
        """Forget ``name`` (ownership lost): appends in flight fail, nothing is closed —
        the next owner fences and recovers the open segment."""
        part = self._parts.pop(name, None)
        if part is not None:
            part.writer.release()

    def has_partition(self, name: str) -> bool:
        return name in self._parts

    def end_offset(self, name: str) -> int:
        """The offset after the last acknowledged entry (appends in flight not counted)."""
        return self.part(name).writer.confirmed_end

    def start_offset(self, name: str) -> int:
        return self.part(name).writer.start

    def segments(self, name: str) -> list[SegmentInfo]:
        return self.part(name).writer.segments()

    async def recorded(self, name: str, segment_id: int) -> SegmentInfo | None:
        """From the metadata store: the partition may be another broker's by now."""
        return await recorded_segment(self.meta, name, segment_id)

    def segment_info(self, name: str, segment_id: int) -> SegmentInfo | None:
        """The live record of one segment of ``name`` (None: not in its list)."""
        for r in self.part(name).writer.records:
            if r.info.segment_id == segment_id:
                return r.info
        return None

    def segment_at(self, name: str, offset: int) -> SegmentInfo:
        """The segment holding ``offset`` (an empty segment gives way to the one before)."""
        writer = self.part(name).writer
        infos = [r.info for r in writer.records]
        if offset < writer.start or not infos:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {name} is before its first retained offset {writer.start}"
            )
        i = bisect.bisect_right([s.first_offset for s in infos], offset) - 1
        while i > 0 and infos[i].is_empty:
            i -= 1
        return infos[max(i, 0)]

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
        """Append one entry; returns once storage has it durable (and every earlier entry
        is acknowledged). If it raises, nothing of it was acknowledged."""
        part = self.part(name)
        entry = await part.writer.append(
            payload, count=count, publish_time=publish_time, event_time=event_time, fmt=fmt
        )
        if self.eager:
            self.roll_if_full(part)
        return entry

    def roll_if_full(self, part: Served) -> None:
        """Close ``part``'s open segment if it is full (size, entries or age) and open the
        next one, in the background; nothing while an earlier roll is under way."""
        if part.rolling is None and part.writer.full:
            part.rolling = asyncio.create_task(self._roll_full(part))

    async def _roll_full(self, part: Served) -> None:
        """Close the full open segment and open the next one now, not at the next append."""
        try:
            await part.writer.ensure_open()
        except StorageError as e:  # released or unloaded meanwhile; else the next append
            log.info("%s: rolling a full segment failed: %s", part.writer.name, e)
        finally:
            part.rolling = None

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset``; [] at the end. Never past the last
        confirmed entry. SegmentNotLocalError for a segment whose entries were dropped
        after its offload (the ledger reads it from the object store)."""
        part = self.part(name)
        end, start = part.writer.confirmed_end, part.writer.start
        if offset >= end:
            if offset > end:
                raise OffsetOutOfRangeError(f"offset {offset} is past the end of {name}")
            return []
        if offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {name} is before its first retained offset {start}"
            )
        cached = part.tail.read(offset, max_entries, max_bytes)
        if cached is not None:
            self.count_tail_hit()
            return cached
        info = self.segment_at(name, offset)
        if offset >= info.end_offset:  # an empty segment between: try the next
            return []
        if not info.local:
            raise SegmentNotLocalError(
                f"segment {info.segment_id} of {name} is offloaded", info.segment_id
            )
        bases, _ = await self.index(info)
        eid = bisect.bisect_right(bases, offset) - 1
        try:
            return await self.read_entries(info, eid, max_entries, max_bytes)
        except StorageError:
            self._moved_on(name, info.segment_id, offset)
            raise

    def _moved_on(self, name: str, segment_id: int, offset: int) -> None:
        """A read of the segment failed: if retention deleted it or its entries were dropped
        after its offload while the read went on, raise what a reader acts on (the error
        for a segment that is gone, or SegmentNotLocalError: read it from the object
        store). Returns while the segment is still here and local."""
        now = self.segment_info(name, segment_id)
        if now is None or now.state is SegmentState.DELETED:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {name} was deleted by retention while it was read; "
                f"the first retained offset is {self.part(name).writer.start}"
            )
        if not now.local:
            raise SegmentNotLocalError(
                f"segment {segment_id} of {name} was offloaded and dropped while it was read",
                segment_id,
            )

    async def next_readable(self, name: str, offset: int) -> int:
        """The next entry's first offset (after damage at ``offset``)."""
        info = self.segment_at(name, offset)
        bases, _ = await self.index(info)
        eid = bisect.bisect_right(bases, offset) - 1
        return int(bases[eid + 1]) if eid + 1 < len(bases) else info.end_offset

    async def find_offset(self, name: str, ts: int) -> int:
        """The first offset whose publish time is >= ``ts`` (the end offset if none)."""
        for info in self.segments(name):
            if info.is_empty or info.max_publish_time < ts or not info.local:
                continue
            found = await self.find_in_segment(name, info.segment_id, ts)
            if found is not None:
                return found
        return self.part(name).writer.confirmed_end

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None:
        info = self.segment_info(name, segment_id)
        if info is None or info.is_empty:
            return None
        if not info.local:
            raise SegmentNotLocalError(f"segment {segment_id} of {name} is offloaded", segment_id)
        bases, times = await self.index(info)
        for base, t in zip(bases, times, strict=False):
            if t >= ts:
                return int(base)
        return None

    # -- segment records ----------------------------------------------------------------

    async def update_segment(
        self,
        name: str,
        segment_id: int,
        *,
        expect: Callable[[SegmentInfo], bool] | None = None,
        **changes: Any,
    ) -> SegmentInfo:
        return await self.part(name).writer.update_segment(segment_id, expect=expect, **changes)

    async def drop_local_copy(self, name: str, segment_id: int) -> None:
        """Delete an OFFLOADED segment's entries from storage; its reads go to the tier."""
        info = self.segment_info(name, segment_id)
        if info is None or info.state is not SegmentState.OFFLOADED or not info.local:
            raise StorageError(f"segment {segment_id} of {name} is not offloaded and local")
        await self.update_segment(name, segment_id, local=False)
        await self.segment_storage.delete(segment_id)

    async def trim(self, name: str, before: int) -> list[SegmentInfo]:
        """Delete the closed segments whose entries all lie before ``before`` (a prefix of
        the list, stopping at the open or an OFFLOADING one); their records, DELETED."""
        doomed = await self.part(name).writer.trim(before)
        for record in doomed:
            await self.segment_storage.delete(record.info.segment_id)
            self.segment_storage.detach(record.info.segment_id)
        return [dataclasses.replace(r.info, state=SegmentState.DELETED) for r in doomed]

    async def roll(self, name: str) -> bool:
        return await self.part(name).writer.roll()

    async def close_all(self) -> None:
        """Close every open segment at its end, so the next writer needs no recovery."""
        for part in list(self._parts.values()):
            if part.rolling is not None:
                await part.rolling
            with contextlib.suppress(StorageError):
                await part.writer.close_open()


class Tail:
    """The newest confirmed entries of a partition, for readers at the tail."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: list[Entry] = []
        self.bases: list[int] = []
        self.head = 0  # entries before it are evicted
        self.size = 0

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.bases.append(entry.base_offset)
        self.size += len(entry.payload)
        while self.size > self.budget and self.head < len(self.entries):
            self.size -= len(self.entries[self.head].payload)
            self.head += 1
        if self.head > 1024 and self.head > len(self.entries) // 2:
            del self.entries[: self.head], self.bases[: self.head]
            self.head = 0

    def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Entry] | None:
        """Entries from the one holding ``offset``, or None when it is older than the tail;
        [] when it is newer than the last confirmed entry (an append still in flight has its
        offsets, not yet its acknowledgement: nothing to read there yet)."""
        if self.head >= len(self.entries) or offset < self.bases[self.head]:
            return None
        if offset >= self.entries[-1].next_offset:
            return []
        i = bisect.bisect_right(self.bases, offset, lo=self.head) - 1
        out: list[Entry] = []
        size = 0
        for entry in self.entries[i : i + max_entries]:
            if out and size + len(entry.payload) > max_bytes:
                break
            out.append(entry)
            size += len(entry.payload)
        return out
