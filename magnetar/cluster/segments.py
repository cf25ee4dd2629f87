"""Segments as replicated ledgers on storage nodes: the ``SegmentStorage`` of a cluster.

Each segment of a partition is a ledger written to an ensemble of E storage nodes, every
entry to a write quorum of Qw of them, acknowledged once Qa have it on disk and every
earlier entry is acknowledged (docs/cluster-protocol.md has the states and messages). The
managed ledger's writer (``magnetar.ledger.writer``) assigns entry ids and offsets and
keeps the segment list; a ledger's quorums and ensembles are its *placement*, recorded in
that list through :attr:`SegmentSpec.persist` before they are used.

Fencing (BookKeeper's recovery open): :meth:`ReplicatedSegments.fence` fences the ledger on
its last ensemble, finds the last entry on enough nodes that no acknowledged one can be
missed, and writes the tail back to its full write quorum.
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.cluster.errors import (
    LedgerFencedError,
    NodeUnavailableError,
    NotEnoughStorageNodesError,
    ReplicasDamagedError,
)
from magnetar.cluster.wire import (
    ADD,
    FLAG_RECOVERY,
    LAC,
    LEDGER,
    READ,
    Op,
    Status,
    unpack_damaged,
    unpack_records,
)
from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import Placement, SegmentRecord, SegmentSpec
from magnetar.storage import SegmentInfo, SegmentState
from magnetar.storage.errors import StorageError
from magnetar.storage.ledger_records import Record

if TYPE_CHECKING:
    from magnetar.cluster.replicated import ReplicatedStorage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Ledger:
    """One segment as a replicated ledger: its record (the writer's), quorums, ensembles
    and entry index."""

    record: SegmentRecord
    quorum: tuple[int, int, int]  # E, Qw, Qa
    ensembles: list[tuple[int, list[str]]]  # (first entry id, node ids), ascending
    last_entry: int = -1  # CLOSED: the final entry; OPEN: the last confirmed (lac)
    # entry id → base offset / publish time, for the entries known here (dense from 0)
    bases: array.array[int] | None = None
    times: array.array[int] | None = None

    @property
    def info(self) -> SegmentInfo:
        return self.record.info

    @property
    def ledger_id(self) -> int:
        return self.record.info.segment_id

    def ensemble_for(self, eid: int) -> list[str]:
        firsts = [first for first, _ in self.ensembles]
        return self.ensembles[max(bisect.bisect_right(firsts, eid) - 1, 0)][1]

    def write_set(self, eid: int) -> list[str]:
        e, qw, _ = self.quorum
        nodes = self.ensemble_for(eid)
        return [nodes[(eid + k) % e] for k in range(qw)]

    def confirmed(self, r: Record) -> None:
        """An entry written here was acknowledged: it joins the entry index."""
        if self.bases is not None and self.times is not None:
            self.bases.append(r.base_offset)
            self.times.append(r.publish_time)

    def placement(self) -> Placement:
        return {
            "quorum": list(self.quorum),
            "ensembles": [[first, nodes] for first, nodes in self.ensembles],
            "lastEntry": self.last_entry,
        }

    @classmethod
    def of(cls, record: SegmentRecord, placement: Placement) -> Ledger:
        e, qw, qa = placement["quorum"]
        ensembles = [(int(first), list(nodes)) for first, nodes in placement["ensembles"]]
        return cls(record, (e, qw, qa), ensembles, placement["lastEntry"])

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ledger:
        """A ledger as a segment list records it (``{"info": ..., **placement}``)."""
        raw = dict(d["info"])
        raw["state"] = SegmentState(raw["state"])
        return cls.of(SegmentRecord(SegmentInfo(**raw)), d)


@dataclass(slots=True)
class _Add:
    record: Record
    body: bytes
    done: asyncio.Future[None]
    acks: set[str] = field(default_factory=set)
    sent: set[str] = field(default_factory=set)


class _Writer:
    """Appends to the OPEN ledger of one partition, acks in entry order (lac)."""

    def __init__(self, store: ReplicatedStorage, spec: SegmentSpec, ledger: Ledger) -> None:
        self.store, self.spec, self.ledger = store, spec, ledger
        self.name = spec.partition
        self.next_eid = ledger.last_entry + 1
        self.lac = ledger.last_entry
        self.pending: collections.OrderedDict[int, _Add] = collections.OrderedDict()
        self.down: set[str] = set()  # failed nodes with no replacement: skipped
        self.failed: StorageError | None = None
        self.drained = asyncio.Event()
        self.drained.set()
        self._changing = asyncio.Lock()

    def _current(self) -> bool:
        return self.store.segment_storage.writers.get(self.ledger.ledger_id) is self

    def add(self, record: Record) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(self.failed)
            return fut
        self.next_eid = record.entry_id + 1
        body = ADD.pack(self.ledger.ledger_id, self.lac, 0) + record.pack()
        add = _Add(record, body, fut)
        self.pending[record.entry_id] = add
        self.drained.clear()
        for node in self.ledger.write_set(record.entry_id):
            if node not in self.down:
                self._send(add, node)
        self._check_quorum_possible(add)
        if self.down and not self._changing.locked():
            self._replace_down_nodes()
        return fut

    def _replace_down_nodes(self) -> None:
        """Nodes written around (no spare then) are replaced once a spare registers."""
        current = self.ledger.ensemble_for(self.next_eid)
        if not any(n.node_id not in current for n in self.store.nodes.writable()):
            return  # (a spare that failed lately is taken only for a node failing now)
        for node in list(self.down):
            self.down.discard(node)
            why = "replacing a node written around"
            asyncio.get_running_loop().create_task(self._node_failed(node, why))

    def _send(self, add: _Add, node: str) -> None:
        add.sent.add(node)
        asyncio.get_running_loop().create_task(self._send_one(add, node))

    async def _send_one(self, add: _Add, node: str) -> None:
        eid = add.record.entry_id
        try:
            status, answer = await self.store.nodes.call(node, Op.ADD, add.body)
        except NodeUnavailableError as e:
            await self._node_failed(node, str(e))
            return
        if self.failed is not None or eid not in self.pending:
            return
        if status is Status.OK:
            if node in self.ledger.write_set(eid):
                add.acks.add(node)
            self._complete()
        elif status is Status.FENCED:
            self.fail(
                LedgerFencedError(
                    f"ledger {self.ledger.ledger_id} of {self.name} was fenced by "
                    "another writer: this broker no longer owns the topic"
                )
            )
        else:
            await self._node_failed(node, f"{status.name}: {answer.decode(errors='replace')}")

    def _complete(self) -> None:
        qa = self.ledger.quorum[2]
        while self.pending:
            eid, add = next(iter(self.pending.items()))
            if len(add.acks) < qa:
                break
            del self.pending[eid]
            self.lac = eid
            self.ledger.last_entry = eid
            self.ledger.confirmed(add.record)
            if not add.done.done():
                add.done.set_result(None)
        if not self.pending:
            self.drained.set()

    def _check_quorum_possible(self, add: _Add) -> None:
        live = [n for n in self.ledger.write_set(add.record.entry_id) if n not in self.down]
        if len(live) < self.ledger.quorum[2]:
            self.fail(
                NotEnoughStorageNodesError(
                    f"{self.name}: only {len(live)} storage node(s) of ledger "
                    f"{self.ledger.ledger_id} can take writes, the ack quorum is "
                    f"{self.ledger.quorum[2]}: nothing was acknowledged. Start storage nodes "
                    "(magnetar admin storage-nodes list) and retry"
                )
            )

    async def _node_failed(self, node: str, why: str) -> None:
        """Replace ``node`` in the ensemble from lac + 1 on, or write without it while the
        ack quorum can still be met; else fail the ledger (nothing above lac was acked)."""
        if self.failed is not None or not self._current():
            return
        async with self._changing:
            if self.failed is not None or not self._current():
                return
            if node not in self.ledger.ensemble_for(self.next_eid):
                return
            if node in self.down:
                return
            log.warning("%s: storage node %s failed (%s)", self.name, node, why)
            current = self.ledger.ensemble_for(self.next_eid)
            replacement = await self._spare({*current, *self.down}, node)
            if self.failed is not None or not self._current():
                return
            if replacement is not None:
                nodes = [replacement if n == node else n for n in current]
                first = self.lac + 1
                ensembles = [(f, ns) for f, ns in self.ledger.ensembles if f < first]
                changed = dataclasses.replace(self.ledger, ensembles=[*ensembles, (first, nodes)])
                try:
                    await self.spec.persist(changed.placement())
                except StorageError as e:
                    self.fail(e)
                    return
                except Exception as e:  # the metadata store is unreachable
                    self.fail(StorageError(f"ensemble change not recorded: {e}"))
                    return
                self.ledger.ensembles = [*ensembles, (first, nodes)]
                self.store.stats["ensemble_changes"] += 1
                log.warning(
                    "%s: ledger %d ensemble from entry %d is now %s",
                    self.name,
                    self.ledger.ledger_id,
                    first,
                    nodes,
                )
            else:
                self.down.add(node)
            for eid, add in list(self.pending.items()):
                add.acks.discard(node)
                if replacement is not None:  # a node taken back may have failed this add
                    add.sent.discard(replacement)
                for target in self.ledger.write_set(eid):
                    if target not in self.down and target not in add.sent:
                        self._send(add, target)
                self._check_quorum_possible(add)
                if self.failed is not None:
                    return
            self._complete()

    async def _spare(self, exclude: set[str], failed: str) -> str | None:
        """A node to take ``failed``'s place, at random: one that did not fail lately, or
        else one that did (see ``NodeDirectory.spares``) and answers a ping now — a node
        that is really gone (killed, its registration not yet expired) is not taken."""
        spares = self.store.nodes.spares(exclude)
        random.shuffle(spares)
        for spare in spares:
            if self.store.nodes.trusted(spare.node_id):
                return spare.node_id
            try:
                status, _ = await self.store.nodes.call(spare.node_id, Op.PING, b"")
            except NodeUnavailableError:
                continue
            if status is Status.OK:
                log.warning(
                    "%s: storage node %s failed lately too, but answers now and no other is "
                    "left: it replaces %s",
                    self.name,
                    spare.node_id,
                    failed,
                )
                return spare.node_id
        return None

    def fail(self, error: StorageError) -> None:
        if self.failed is None:
            self.failed = error
            log.warning("%s: ledger %d failed: %s", self.name, self.ledger.ledger_id, error)
        for add in self.pending.values():
            if not add.done.done():
                add.done.set_exception(error)
                add.done.exception()
        self.pending.clear()
        self.drained.set()


class ReplicatedSegments:
    """``SegmentStorage`` over storage nodes (see the module docstring)."""

    def __init__(self, store: ReplicatedStorage) -> None:
        self.store = store
        self.ledgers: dict[int, Ledger] = {}  # attached: the segments of served partitions
        self.writers: dict[int, _Writer] = {}  # the OPEN ledgers written here
        self._specs: dict[int, SegmentSpec] = {}

    def ledger(self, segment: int) -> Ledger:
        ledger = self.ledgers.get(segment)
        if ledger is None:
            raise StorageError(f"ledger {segment} is not known here")
        return ledger

    # -- SegmentStorage -----------------------------------------------------------------

    async def open_segment(self, spec: SegmentSpec) -> None:
        """A fresh ledger on E writable nodes (its placement is recorded by the writer)."""
        store = self.store
        e, qw, qa = await store.quorum_for(spec.partition)
        chosen = store.nodes.ensemble(e)
        # Like Pulsar's managed ledger, wait a while for nodes (one may be restarting)
        # before failing the appends that need the new ledger.
        deadline = store.clock.monotonic() + store.settings.add_timeout_ms / 1000
        while chosen is None and store.clock.monotonic() < deadline:
            await asyncio.sleep(0.2)
            await store.nodes.refresh()
            chosen = store.nodes.ensemble(e)
        if chosen is None:
            nodes = [n.node_id for n in store.nodes.nodes.values() if n.writable]
            raise NotEnoughStorageNodesError(
                f"{spec.partition}: a new ledger needs {e} writable storage nodes, "
                f"{len(nodes)} are registered read-write ({', '.join(nodes) or 'none'}); "
                "start storage nodes and retry"
            )
        ensemble = [n.node_id for n in chosen]
        arrays = array.array("q"), array.array("q")
        ledger = Ledger(spec.record, (e, qw, qa), [(0, ensemble)], -1, *arrays)
        self.ledgers[spec.segment_id] = ledger
        self._specs[spec.segment_id] = spec
        self.writers[spec.segment_id] = _Writer(store, spec, ledger)

    def attach(self, spec: SegmentSpec, placement: Placement) -> None:
        self.ledgers[spec.segment_id] = Ledger.of(spec.record, placement)
        self._specs[spec.segment_id] = spec

    def detach(self, segment: int) -> None:
        """Forget the ledger; appends in flight fail (another broker writes it now)."""
        writer = self.writers.pop(segment, None)
        if writer is not None:
            writer.fail(LedgerFencedError(f"ledger {segment} moved to another broker"))
        self.ledgers.pop(segment, None)
        self._specs.pop(segment, None)

    def placement(self, segment: int) -> Placement:
        return self.ledger(segment).placement()

    def can_roll(self, segment: int) -> bool:
        """Not while fewer than E storage nodes are writable: the new ledger could not be
        formed and every append would fail until one comes back, while the open ledger
        still takes writes at its ack quorum; it rolls once nodes are back."""
        return len(self.store.nodes.writable()) >= self.ledger(segment).quorum[0]

    async def append(self, segment: int, entry_id: int, entry: Entry) -> None:
        """Durable on Qa nodes (and every earlier entry) when it returns."""
        writer = self.writers.get(segment)
        if writer is None:
            raise LedgerFencedError(f"ledger {segment} is not open for writing here")
        await writer.add(Record.of(entry_id, entry))

    async def seal(self, segment: int, last_entry: int) -> None:
        """Appends in flight end first; the ledger ends at ``last_entry``."""
        writer = self.writers.get(segment)
        if writer is not None:
            await writer.drained.wait()
            del self.writers[segment]
        self.ledger(segment).last_entry = last_entry

    async def last_confirmed(self, segment: int) -> int:
        writer = self.writers.get(segment)
        return writer.lac if writer is not None else self.ledger(segment).last_entry

    async def delete(self, segment: int) -> None:
        """Delete the ledger's entries from its storage nodes (its placement stays known
        while the segment list names it)."""
        ledger = self.ledger(segment)
        self.store.repairs.forget(segment)
        for node in {n for _, ns in ledger.ensembles for n in ns}:
            try:
                await self.store.nodes.call(node, Op.DELETE, LEDGER.pack(segment))
            except NodeUnavailableError as e:  # its copy is garbage now; logged for the operator
                log.warning("ledger %d: delete on %s failed: %s", segment, node, e)

    async def read(
        self, segment: int, first: int, last: int, *, max_bytes: int = 64 << 20
    ) -> list[Entry]:
        ledger = self.ledger(segment)
        records = await self.read_records(ledger, first, last, max_bytes)
        return [r.entry(segment) for r in records]

    async def record_placement(self, ledger: Ledger, changed: Ledger) -> None:
        """Record ``changed`` (a new placement of ``ledger``) in the segment list, then use
        it (re-replication of a closed ledger)."""
        await self._specs[ledger.ledger_id].persist(changed.placement())
        ledger.ensembles = changed.ensembles

    # -- fencing ------------------------------------------------------------------------

    async def fence(self, segment: int) -> int:
        """Fence the previous writer's ledger, find its last entry, write its tail back."""
        ledger = self.ledger(segment)
        name = self._specs[segment].partition
        nodes_api = self.store.nodes
        lid = ledger.ledger_id
        e, qw, qa = ledger.quorum
        nodes = ledger.ensembles[-1][1]
        answers = await asyncio.gather(
            *(nodes_api.call(n, Op.FENCE, LEDGER.pack(lid)) for n in nodes),
            return_exceptions=True,
        )
        fenced_at = {
            n: LAC.unpack(a[1])[0]
            for n, a in zip(nodes, answers, strict=True)
            if isinstance(a, tuple) and a[0] == Status.OK and len(a[1]) == LAC.size
        }
        for n, a in zip(nodes, answers, strict=True):
            if n not in fenced_at:
                log.warning("%s: storage node %s did not fence ledger %d: %s", name, n, lid, a)
        fenced = set(fenced_at)
        for start in range(e):  # every write quorum must have lost its ack quorum
            quorum = {nodes[(start + k) % e] for k in range(qw)}
            if len(quorum & fenced) < qw - qa + 1:
                raise NotEnoughStorageNodesError(
                    f"cannot recover ledger {lid} of {name}: storage nodes "
                    f"{sorted(set(nodes) - fenced)} did not answer; retry when they are back"
                )
        lac = max([*fenced_at.values(), ledger.last_entry])
        eid = lac + 1
        while True:
            found = await self._probe(ledger, eid)
            if found is None:
                break
            for node in ledger.write_set(eid):  # back to its full write quorum
                body = ADD.pack(lid, lac, FLAG_RECOVERY) + found.pack()
                with contextlib.suppress(NodeUnavailableError):
                    await nodes_api.call(node, Op.ADD, body)
            eid += 1
        ledger.last_entry = eid - 1
        self.store.stats["recoveries"] += 1
        return eid - 1

    async def _probe(self, ledger: Ledger, eid: int) -> Record | None:
        """Entry ``eid`` if any replica has it; None once enough replicas say it is absent
        that it cannot have been acknowledged (Qw − Qa + 1 of its write quorum)."""
        _, qw, qa = ledger.quorum
        absent = 0
        for node in ledger.write_set(eid):
            try:
                status, body = await self.store.nodes.call(
                    node, Op.READ, READ.pack(ledger.ledger_id, eid, eid, 64 << 20)
                )
            except NodeUnavailableError:
                continue
            if status is Status.OK:
                records = unpack_records(body)
                if records:
                    return records[0]
            if status in (Status.OK, Status.NO_ENTRY, Status.NO_LEDGER):
                absent += 1
            if absent >= qw - qa + 1:
                return None
        raise NotEnoughStorageNodesError(
            f"cannot tell whether entry {eid} of ledger {ledger.ledger_id} exists: too few "
            "storage nodes answered; retry when they are back"
        )

    async def read_records(
        self, ledger: Ledger, first: int, last: int, max_bytes: int
    ) -> list[Record]:
        out: list[Record] = []
        size = 0
        eid = first
        while eid <= last and (size < max_bytes or not out):
            got: list[Record] = []
            errors = []
            damaged = 0
            for node in ledger.write_set(eid):
                try:
                    status, body = await self.store.nodes.call(
                        node, Op.READ, READ.pack(ledger.ledger_id, eid, last, max_bytes - size)
                    )
                except NodeUnavailableError as e:
                    errors.append(str(e))
                    continue
                if status is Status.OK:
                    got = unpack_records(body)
                    if got:
                        break
                elif status is Status.DAMAGED:  # the intact records before it, if any
                    problem, got = unpack_damaged(body)
                    self.store.repairs.met(ledger, node, problem)
                    if got:
                        break
                    damaged += 1
                    errors.append(problem)
                    continue
                errors.append(f"{node}: {status.name}")
            if not got and out:  # what lies before it is delivered; the next read meets it
                break
            if not got and damaged == len(ledger.write_set(eid)):
                raise ReplicasDamagedError(
                    f"entry {eid} of ledger {ledger.ledger_id} is damaged on every replica "
                    f"({'; '.join(errors)}); restore it from a backup"
                )
            if not got:
                raise StorageError(
                    f"entry {eid} of ledger {ledger.ledger_id} could not be read from any "
                    f"replica ({'; '.join(errors)})"
                )
            out += got
            size += sum(len(r.payload) for r in got)
            eid = got[-1].entry_id + 1
        return out
