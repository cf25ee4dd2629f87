"""Replicated storage: the managed ledger's ``LedgerStorage`` over storage nodes.

Writes go through the managed ledger's writer (``magnetar.ledger.writer.SegmentWriter``):
it assigns offsets and entry ids, decides rollover, keeps the partition's segment list in
``/managed-ledgers/<partition>`` by compare-and-set and recovers a crashed writer's open
segment by fencing it. Its segments are ledgers on storage nodes
(:class:`~magnetar.cluster.segments.ReplicatedSegments`). This class serves the reads: the
tail of each partition from memory, older entries from any replica through the entry index,
checks and repairs, direct replica reads, and re-replication of ledgers that name a node
gone for good.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import collections
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.cluster.client import NodeDirectory
from magnetar.cluster.errors import NodeUnavailableError
from magnetar.cluster.repair import Repairs
from magnetar.cluster.segments import Ledger, ReplicatedSegments
from magnetar.cluster.wire import ADD, FLAG_RECOVERY, INDEX_ROW, LEDGER, Op, Status
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.config import Settings
from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import RolloverPolicy
from magnetar.ledger.writer import SEGMENT_LISTS, SegmentIds, SegmentWriter
from magnetar.meta import MetadataStore
from magnetar.meta.errors import NodeExistsError
from magnetar.storage import OffsetOutOfRangeError, SegmentInfo, SegmentState
from magnetar.storage.errors import (
    PartitionNotFoundError,
    SegmentNotLocalError,
    StorageError,
)

log = logging.getLogger(__name__)

ROOT = SEGMENT_LISTS
TAIL_BYTES = 32 << 20  # confirmed entries kept per partition for tail reads

__all__ = ["ROOT", "Ledger", "ReplicatedStorage"]


class _Served:
    """A partition this broker writes: its writer and the tail of confirmed entries."""

    def __init__(self, writer: SegmentWriter, tail: _Tail) -> None:
        self.writer = writer
        self.tail = tail


class ReplicatedStorage:
    """``LedgerStorage`` over storage nodes. Create with :meth:`open`."""

    def __init__(self, settings: Settings, meta: MetadataStore, clock: Clock) -> None:
        self.settings = settings
        self.meta = meta
        self.clock = clock
        self.quorum = (settings.ensemble_size, settings.write_quorum, settings.ack_quorum)
        self.nodes = NodeDirectory(meta, settings.add_timeout_ms / 1000, settings.peer_tls_context)
        self.segment_storage = ReplicatedSegments(self)
        self.ids = SegmentIds(meta)
        self.policy = RolloverPolicy(
            settings.segment_max_bytes, settings.segment_max_entries, settings.segment_max_age
        )
        self._parts: dict[str, _Served] = {}
        self.stats: collections.Counter[str] = collections.Counter()
        self.under_replicated: dict[int, list[str]] = {}  # ledger id → lost nodes it names
        # the namespace's `persistence` policy of a partition (set by whoever knows policies)
        self.persistence: Callable[[str], Awaitable[tuple[int, int, int] | None]] | None = None
        self._auditor: asyncio.Task[None] | None = None
        self.repairs = Repairs(self)  # damaged replicas found by reads and checks

    @classmethod
    async def open(
        cls, settings: Settings, meta: MetadataStore, *, clock: Clock = SYSTEM_CLOCK
    ) -> ReplicatedStorage:
        store = cls(settings, meta, clock)
        with contextlib.suppress(NodeExistsError):
            await meta.put(ROOT, b"", expected_version=-1)
        await store.nodes.start()
        store._auditor = asyncio.create_task(store._audit_loop(), name="magnetar-auditor")
        return store

    async def quorum_for(self, name: str) -> tuple[int, int, int]:
        """E, Qw, Qa for a new ledger of ``name``: its namespace's policy, else the settings."""
        if self.persistence is not None:
            chosen = await self.persistence(name)
            if chosen is not None:
                return chosen
        return self.quorum

    def partitions(self) -> list[str]:
        return sorted(self._parts)

    def _part(self, name: str) -> _Served:
        part = self._parts.get(name)
        if part is None:
            raise PartitionNotFoundError(f"no partition {name!r}")
        return part

    def _ledgers(self, name: str) -> list[Ledger]:
        return self._ledgers_of(self._part(name).writer)

    def _ledgers_of(self, writer: SegmentWriter) -> list[Ledger]:
        ledgers = self.segment_storage.ledgers
        return [lg for r in writer.records if (lg := ledgers.get(r.info.segment_id)) is not None]

    def _find(self, name: str, segment_id: int) -> Ledger | None:
        return next((lg for lg in self._ledgers(name) if lg.ledger_id == segment_id), None)

    def _ledger_at(self, name: str, offset: int) -> Ledger:
        writer = self._part(name).writer
        ledgers = self._ledgers(name)
        if offset < writer.start or not ledgers:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {name} is before its first retained offset {writer.start}"
            )
        firsts = [lg.info.first_offset for lg in ledgers]
        i = bisect.bisect_right(firsts, offset) - 1
        while i > 0 and ledgers[i].info.is_empty:
            i -= 1
        return ledgers[max(i, 0)]

    # -- partitions ---------------------------------------------------------------------

    async def create_partition(self, name: str) -> None:
        """Open the partition (recovering its last ledger if its writer died) or create it."""
        if name in self._parts:
            return
        tail = _Tail(TAIL_BYTES)
        writer = await SegmentWriter.open(
            name, self.segment_storage, self.meta, self.ids, self.policy, self.clock, tail.append
        )
        self._parts[name] = _Served(writer, tail)

    async def delete_partition(self, name: str) -> None:
        part = self._part(name)
        del self._parts[name]
        with contextlib.suppress(Exception):
            await part.writer.delete()

    async def unload(self, name: str) -> None:
        """Close ``name``'s open ledger at its end and forget it: the next owner opens it
        without recovery."""
        part = self._parts.pop(name, None)
        if part is not None:
            await part.writer.unload()

    def release(self, name: str) -> None:
        """Forget ``name`` (ownership lost): appends in flight fail, nothing is closed —
        the next owner fences and recovers the open ledger."""
        part = self._parts.pop(name, None)
        if part is not None:
            part.writer.release()

    def has_partition(self, name: str) -> bool:
        return name in self._parts

    def serves_ledger(self, ledger_id: int) -> bool:
        """Whether a partition this broker serves has the ledger."""
        return any(
            r.info.segment_id == ledger_id for p in self._parts.values() for r in p.writer.records
        )

    def end_offset(self, name: str) -> int:
        return self._part(name).writer.end

    def start_offset(self, name: str) -> int:
        return self._part(name).writer.start

    def segments(self, name: str) -> list[SegmentInfo]:
        return self._part(name).writer.segments()

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
        """Append one entry; returns once Qa storage nodes have it on disk (and every earlier
        entry is acknowledged). If it raises, nothing of it was acknowledged."""
        return await self._part(name).writer.append(
            payload, count=count, publish_time=publish_time, event_time=event_time, fmt=fmt
        )

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset``; [] at the end. Never past the last
        confirmed entry; from any replica, the next on error."""
        part = self._part(name)
        end, start = part.writer.end, part.writer.start
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
            return cached
        ledger = self._ledger_at(name, offset)
        if offset >= ledger.info.end_offset:  # an empty ledger between: try the next
            return []
        if not ledger.info.local:
            raise SegmentNotLocalError(
                f"segment {ledger.ledger_id} of {name} is offloaded", ledger.ledger_id
            )
        bases = await self._index(ledger)
        eid = bisect.bisect_right(bases, offset) - 1
        last = min(ledger.last_entry, eid + max_entries - 1)
        records = await self.segment_storage.read_records(ledger, eid, last, max_bytes)
        return [r.entry(ledger.ledger_id) for r in records]

    async def _index(self, ledger: Ledger) -> array.array[int]:
        """Base offsets by entry id (see :meth:`_index_arrays`)."""
        return (await self._index_arrays(ledger))[0]

    async def _index_arrays(self, ledger: Ledger) -> tuple[array.array[int], array.array[int]]:
        """Base offsets and publish times by entry id: kept for ledgers written here, else
        fetched once from the replicas (the union of what each holds).

        Entries no replica holds although every replica answered (lost to damage, see
        :mod:`.repair`) get the end offset of the entry before them: a read there meets the
        damage on every replica. Such an index is not kept: after a repair it is fetched again.
        """
        kept, kept_times = ledger.bases, ledger.times
        if kept is not None and kept_times is not None and len(kept) > ledger.last_entry:
            return kept, kept_times
        rows: dict[int, tuple[int, int, int]] = {}
        nodes = {n for _, ns in ledger.ensembles for n in ns}
        answered = 0
        for node in nodes:
            try:
                status, body = await self.nodes.call(node, Op.INDEX, LEDGER.pack(ledger.ledger_id))
            except NodeUnavailableError:
                continue
            answered += status in (Status.OK, Status.NO_LEDGER)
            if status is not Status.OK:
                continue
            for at in range(0, len(body), INDEX_ROW.size):
                eid, base, count, ts = INDEX_ROW.unpack_from(body, at)
                if eid <= ledger.last_entry:
                    rows[eid] = (base, count, ts)
        missing = [i for i in range(ledger.last_entry + 1) if i not in rows]
        if missing and answered < len(nodes):
            raise StorageError(
                f"entries {missing[:5]}… of ledger {ledger.ledger_id} are on no reachable "
                "storage node"
            )
        bases, times = array.array("q"), array.array("q")
        end, ts = ledger.info.first_offset, ledger.info.first_publish_time
        for i in range(ledger.last_entry + 1):
            base, count, ts = rows.get(i, (end, 0, ts))
            bases.append(base)
            times.append(ts)
            end = base + count
        if not missing:
            ledger.bases, ledger.times = bases, times
        return bases, times

    async def check(self, name: str, *, repair: bool = False) -> list[dict[str, Any]]:
        """Every storage node of each ledger reads and verifies its copy; a row per ledger
        names each node with damaged or missing entries (see :mod:`.repair`). With
        ``repair``, those copies of closed ledgers are written again from good ones first."""
        return await self.repairs.check(self._ledgers(name), repair=repair)

    async def next_readable(self, name: str, offset: int) -> int:
        """The next entry's first offset (reads of an entry go to every replica first)."""
        ledger = self._ledger_at(name, offset)
        bases = await self._index(ledger)
        eid = bisect.bisect_right(bases, offset) - 1
        return int(bases[eid + 1]) if eid + 1 < len(bases) else ledger.info.end_offset

    def damaged(self, name: str) -> dict[int, str]:
        """Ledgers of ``name`` with a damaged or incomplete replica not yet repaired."""
        return self.repairs.damaged({lg.ledger_id for lg in self._ledgers(name)})

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        """Where a reader may fetch a closed segment straight from storage nodes: one
        ``{"first", "end", "flight": [URLs]}`` per ensemble fragment, every listed node
        holding the whole fragment. None when no node holds whole fragments (striping,
        E > Qw) or the segment is open: read it through the broker then."""
        ledger = self._find(name, segment_id)
        if ledger is None or ledger.info.state is SegmentState.OPEN or ledger.info.is_empty:
            return None
        e, qw, _ = ledger.quorum
        if e != qw:
            return None
        bases = await self._index(ledger)
        out = []
        for i, (first, nodes) in enumerate(ledger.ensembles):
            last = ledger.ensembles[i + 1][0] - 1 if i + 1 < len(ledger.ensembles) else None
            last = ledger.last_entry if last is None else min(last, ledger.last_entry)
            if first > last:
                continue
            urls = [
                f"grpc://{info.address}:{info.flight}"
                for n in nodes
                if (info := self.nodes.nodes.get(n)) is not None and info.flight
            ]
            if not urls:
                return None
            end = bases[last + 1] if last + 1 < len(bases) else ledger.info.end_offset
            out.append({"first": bases[first], "end": end, "flight": urls})
        return out

    async def find_offset(self, name: str, ts: int) -> int:
        for ledger in self._ledgers(name):
            if ledger.info.is_empty or ledger.info.max_publish_time < ts:
                continue
            found = await self.find_in_segment(name, ledger.ledger_id, ts)
            if found is not None:
                return found
        return self._part(name).writer.end

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None:
        ledger = self._find(name, segment_id)
        if ledger is None or ledger.info.is_empty:
            return None
        bases, times = await self._index_arrays(ledger)
        for base, t in zip(bases, times, strict=False):
            if t >= ts:
                return int(base)
        return None

    # -- segment records ----------------------------------------------------------------

    async def update_segment(self, name: str, segment_id: int, **changes: Any) -> SegmentInfo:
        return await self._part(name).writer.update_segment(segment_id, **changes)

    async def drop_local_copy(self, name: str, segment_id: int) -> None:
        """Delete an OFFLOADED ledger's entries from the storage nodes."""
        await self.update_segment(name, segment_id, local=False)
        await self.segment_storage.delete(segment_id)

    async def trim(self, name: str, before: int) -> list[SegmentInfo]:
        doomed = await self._part(name).writer.trim(before)
        for record in doomed:
            await self.segment_storage.delete(record.info.segment_id)
            self.segment_storage.detach(record.info.segment_id)
        return [dataclasses.replace(r.info, state=SegmentState.DELETED) for r in doomed]

    async def roll(self, name: str) -> bool:
        return await self._part(name).writer.roll()

    # -- re-replication -----------------------------------------------------------------

    async def _audit_loop(self) -> None:
        """Copy the fragments of closed ledgers that name a node gone past the grace period
        to a live node, until every entry is back at its write quorum (BookKeeper's auditor
        and replication worker in one; this broker audits the partitions it writes)."""
        interval = min(max(self.settings.rereplication_grace_s / 4, 0.5), 10.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.audit()
            except Exception as e:  # the next round tries again
                log.warning("re-replication round failed: %s", e)

    async def audit(self) -> None:
        grace = self.settings.rereplication_grace_s
        found: dict[int, list[str]] = {}
        for part in list(self._parts.values()):
            for ledger in self._ledgers_of(part.writer):
                if ledger.info.state is SegmentState.OPEN or not ledger.info.local:
                    continue
                named = {n for _, ns in ledger.ensembles for n in ns}
                lost = sorted(n for n in named if self.nodes.gone_for(n) > grace)
                if lost:
                    found[ledger.ledger_id] = lost
        self.under_replicated = found
        await self.repairs.retry()
        for part in list(self._parts.values()):
            for ledger in self._ledgers_of(part.writer):
                if ledger.ledger_id in found:
                    await self._rereplicate(part, ledger, found[ledger.ledger_id])
                    self.under_replicated.pop(ledger.ledger_id, None)

    async def _rereplicate(self, part: _Served, ledger: Ledger, lost: list[str]) -> None:
        ensembles = list(ledger.ensembles)
        for i, (first, nodes) in enumerate(ensembles):
            end = ensembles[i + 1][0] - 1 if i + 1 < len(ensembles) else ledger.last_entry
            for dead in [n for n in nodes if n in lost]:
                spare = [n.node_id for n in self.nodes.writable() if n.node_id not in nodes]
                if not spare:
                    log.warning(
                        "ledger %d: no storage node to re-replicate %s's entries to",
                        ledger.ledger_id,
                        dead,
                    )
                    return
                target = random.choice(spare)
                copied = await self.copy_fragment(ledger, first, end, dead, target)
                nodes = [target if n == dead else n for n in nodes]
                ensembles[i] = (first, nodes)
                async with part.writer.lock:
                    changed = dataclasses.replace(ledger, ensembles=list(ensembles))
                    await self.segment_storage.record_placement(ledger, changed)
                self.stats["rereplicated_entries"] += copied
                self.stats["rereplicated_fragments"] += 1
                log.warning(
                    "ledger %d of %s: entries %d..%d of lost node %s re-replicated to %s "
                    "(%d copied)",
                    ledger.ledger_id,
                    part.writer.name,
                    first,
                    end,
                    dead,
                    target,
                    copied,
                )

    async def copy_fragment(
        self, ledger: Ledger, first: int, end: int, dead: str, target: str
    ) -> int:
        """Copy the entries of ``first..end`` whose write set names ``dead`` to ``target``."""
        copied = 0
        eid = first
        while eid <= end:
            batch = await self.segment_storage.read_records(
                ledger, eid, min(end, eid + 999), 8 << 20
            )
            bodies = [
                ADD.pack(ledger.ledger_id, ledger.last_entry, FLAG_RECOVERY) + r.pack()
                for r in batch
                if dead in ledger.write_set(r.entry_id)
            ]
            answers = await asyncio.gather(
                *(self.nodes.call(target, Op.ADD, body) for body in bodies)
            )  # in flight together: the target's group commit takes them in few fsyncs
            for status, answer in answers:
                if status is not Status.OK:
                    raise StorageError(
                        f"re-replicating ledger {ledger.ledger_id} to {target}: "
                        f"{status.name} {answer.decode(errors='replace')}"
                    )
            copied += len(bodies)
            eid = batch[-1].entry_id + 1
        return copied

    async def aclose(self) -> None:
        """Close every OPEN ledger at its end, so the next writer needs no recovery."""
        if self._auditor is not None:
            self._auditor.cancel()
            with contextlib.suppress(BaseException):
                await self._auditor
        for part in list(self._parts.values()):
            with contextlib.suppress(StorageError):
                await part.writer.close_open()
        await self.nodes.aclose()


class _Tail:
    """The newest confirmed entries of a partition, for readers at the tail."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: list[Entry] = []
        self.bases: list[int] = []
        self.head = 0  # entries before it are evicted
        self.size = 0

    def append(self, entry: Entry) -> None:
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
