"""Replicated storage: the managed ledger's ``LedgerStorage`` over storage nodes.

Writes go through the managed ledger's writer (``magnetar.ledger.writer.SegmentWriter``):
it assigns offsets and entry ids, decides rollover, keeps the partition's segment list in
``/managed-ledgers/<partition>`` by compare-and-set and recovers a crashed writer's open
segment by fencing it. Its segments are ledgers on storage nodes
(:class:`~magnetar.cluster.segments.ReplicatedSegments`). The partitions, the tail of each
in memory and reads by offset are shared with local storage
(:class:`~magnetar.ledger.segmented.SegmentedStorage`); this class adds the entry index
fetched from replicas, reads from any replica, checks and repairs, direct replica reads, and
re-replication of ledgers that name a node gone for good.
"""

from __future__ import annotations

import array
import asyncio
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
from magnetar.ledger.segmented import Index, SegmentedStorage, Served
from magnetar.ledger.writer import SEGMENT_LISTS, SegmentWriter
from magnetar.meta import MetadataStore
from magnetar.meta.errors import NodeExistsError
from magnetar.storage import SegmentInfo, SegmentState
from magnetar.storage.errors import (
    StorageError,
)

log = logging.getLogger(__name__)

ROOT = SEGMENT_LISTS

__all__ = ["ROOT", "Ledger", "ReplicatedStorage"]


class ReplicatedStorage(SegmentedStorage):
    """``LedgerStorage`` over storage nodes. Create with :meth:`open`."""

    segment_storage: ReplicatedSegments

    def __init__(self, settings: Settings, meta: MetadataStore, clock: Clock) -> None:
        policy = RolloverPolicy(
            settings.segment_max_bytes, settings.segment_max_entries, settings.segment_max_age
        )
        self.settings = settings
        self.quorum = (settings.ensemble_size, settings.write_quorum, settings.ack_quorum)
        self.nodes = NodeDirectory(meta, settings.add_timeout_ms / 1000, settings.peer_tls_context)
        super().__init__(meta, clock, ReplicatedSegments(self), policy)
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

    def _ledgers(self, name: str) -> list[Ledger]:
        return self._ledgers_of(self.part(name).writer)

    def _ledgers_of(self, writer: SegmentWriter) -> list[Ledger]:
        ledgers = self.segment_storage.ledgers
        return [lg for r in writer.records if (lg := ledgers.get(r.info.segment_id)) is not None]

    def _find(self, name: str, segment_id: int) -> Ledger | None:
        return next((lg for lg in self._ledgers(name) if lg.ledger_id == segment_id), None)

    def serves_ledger(self, ledger_id: int) -> bool:
        """Whether a partition this broker serves has the ledger."""
        return any(r.info.segment_id == ledger_id for p in self.served() for r in p.writer.records)

    # -- reads --------------------------------------------------------------------------

    async def index(self, info: SegmentInfo) -> Index:
        return await self._index_arrays(self.segment_storage.ledgers[info.segment_id])

    async def read_entries(
        self, info: SegmentInfo, first: int, max_entries: int, max_bytes: int
    ) -> list[Entry]:
        """From any replica, the next on error."""
        ledger = self.segment_storage.ledgers[info.segment_id]
        last = min(ledger.last_entry, first + max_entries - 1)
        records = await self.segment_storage.read_records(ledger, first, last, max_bytes)
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
        for part in self.served():
            for ledger in self._ledgers_of(part.writer):
                if ledger.info.state is SegmentState.OPEN or not ledger.info.local:
                    continue
                named = {n for _, ns in ledger.ensembles for n in ns}
                lost = sorted(n for n in named if self.nodes.gone_for(n) > grace)
                if lost:
                    found[ledger.ledger_id] = lost
        self.under_replicated = found
        await self.repairs.retry()
        for part in self.served():
            for ledger in self._ledgers_of(part.writer):
                if ledger.ledger_id in found:
                    await self._rereplicate(part, ledger, found[ledger.ledger_id])
                    self.under_replicated.pop(ledger.ledger_id, None)

    async def _rereplicate(self, part: Served, ledger: Ledger, lost: list[str]) -> None:
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
        await self.close_all()
        await self.nodes.aclose()
