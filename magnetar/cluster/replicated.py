"""Replicated storage: the managed ledger's ``LedgerStorage`` over storage nodes.

Each segment of a partition is a ledger written to an ensemble of E storage nodes, every
entry to a write quorum of Qw of them, acknowledged once Qa have it on disk and every
earlier entry is acknowledged (docs/cluster-protocol.md has the states and messages). The
partition's segment list, each ledger's ensembles and its end live in one metadata node,
``/managed-ledgers/<partition>``, written only by compare-and-set: a writer that lost the
partition to a recoverer fails its next metadata write, and its adds are refused by the
fenced nodes before that.

This broker is the only writer of the partitions it opens. When it opens a partition whose
last ledger is still OPEN (its previous writer crashed), it recovers that ledger first:
fence, find the last entry on Qa nodes, write the tail back to Qw, close it there.
"""

from __future__ import annotations

import array
import asyncio
import bisect
import collections
import contextlib
import dataclasses
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from magnetar.cluster.client import NodeDirectory
from magnetar.cluster.errors import (
    LedgerFencedError,
    NodeUnavailableError,
    NotEnoughStorageNodesError,
    ReplicasDamagedError,
)
from magnetar.cluster.repair import Repairs
from magnetar.cluster.wire import (
    ADD,
    FLAG_RECOVERY,
    INDEX_ROW,
    LAC,
    LEDGER,
    READ,
    Op,
    Record,
    Status,
    unpack_damaged,
    unpack_records,
)
from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.config import Settings
from magnetar.core.entries import Entry
from magnetar.meta import MetadataStore
from magnetar.meta.counters import reserve_block
from magnetar.meta.errors import BadVersionError, NodeExistsError
from magnetar.storage import OffsetOutOfRangeError, SegmentInfo, SegmentState
from magnetar.storage.errors import (
    PartitionNotFoundError,
    SegmentNotLocalError,
    StorageError,
)
from magnetar.storage.index import NO_TIME
from magnetar.storage.records import check_header_fields

log = logging.getLogger(__name__)

ROOT = "/managed-ledgers"
LEDGER_IDS = "/ledgers/next-id"
TAIL_BYTES = 32 << 20  # confirmed entries kept per partition for tail reads


@dataclass(slots=True)
class Ledger:
    """One segment as a replicated ledger: its record, quorums, ensembles and entry index."""

    info: SegmentInfo
    quorum: tuple[int, int, int]  # E, Qw, Qa
    ensembles: list[tuple[int, list[str]]]  # (first entry id, node ids), ascending
    last_entry: int = -1  # CLOSED: the final entry; OPEN: the last confirmed (lac)
    # entry id → base offset / publish time, for the entries known here (dense from 0)
    bases: array.array[int] | None = None
    times: array.array[int] | None = None

    @property
    def ledger_id(self) -> int:
        return self.info.segment_id

    def ensemble_for(self, eid: int) -> list[str]:
        firsts = [first for first, _ in self.ensembles]
        return self.ensembles[max(bisect.bisect_right(firsts, eid) - 1, 0)][1]

    def write_set(self, eid: int) -> list[str]:
        e, qw, _ = self.quorum
        nodes = self.ensemble_for(eid)
        return [nodes[(eid + k) % e] for k in range(qw)]

    def to_json(self) -> dict[str, Any]:
        return {
            "info": dataclasses.asdict(self.info),
            "quorum": list(self.quorum),
            "ensembles": [[first, nodes] for first, nodes in self.ensembles],
            "lastEntry": self.last_entry,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ledger:
        raw = dict(d["info"])
        raw["state"] = SegmentState(raw["state"])
        e, qw, qa = d["quorum"]
        ensembles = [(int(first), list(nodes)) for first, nodes in d["ensembles"]]
        return cls(SegmentInfo(**raw), (e, qw, qa), ensembles, d["lastEntry"])


@dataclass(slots=True)
class _Add:
    record: Record
    body: bytes
    done: asyncio.Future[Entry]
    acks: set[str] = field(default_factory=set)
    sent: set[str] = field(default_factory=set)


class _Writer:
    """Appends to the OPEN ledger of one partition, acks in entry order (lac)."""

    def __init__(self, store: ReplicatedStorage, part: _Partition, ledger: Ledger) -> None:
        self.store, self.part, self.ledger = store, part, ledger
        self.next_eid = ledger.last_entry + 1
        self.lac = ledger.last_entry
        self.pending: collections.OrderedDict[int, _Add] = collections.OrderedDict()
        self.down: set[str] = set()  # failed nodes with no replacement: skipped
        self.failed: StorageError | None = None
        self.drained = asyncio.Event()
        self.drained.set()
        self._changing = asyncio.Lock()

    def add(self, record: Record) -> asyncio.Future[Entry]:
        fut: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
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
            return
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
                    f"ledger {self.ledger.ledger_id} of {self.part.name} was fenced by "
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
            entry = self.part.confirmed(self.ledger, add.record)
            if not add.done.done():
                add.done.set_result(entry)
        if not self.pending:
            self.drained.set()

    def _check_quorum_possible(self, add: _Add) -> None:
        live = [n for n in self.ledger.write_set(add.record.entry_id) if n not in self.down]
        if len(live) < self.ledger.quorum[2]:
            self.fail(
                NotEnoughStorageNodesError(
                    f"{self.part.name}: only {len(live)} storage node(s) of ledger "
                    f"{self.ledger.ledger_id} can take writes, the ack quorum is "
                    f"{self.ledger.quorum[2]}: nothing was acknowledged. Start storage nodes "
                    "(magnetar admin storage-nodes list) and retry"
                )
            )

    async def _node_failed(self, node: str, why: str) -> None:
        """Replace ``node`` in the ensemble from lac + 1 on, or write without it while the
        ack quorum can still be met; else fail the ledger (nothing above lac was acked)."""
        if self.failed is not None or self.part.writer is not self:
            return
        async with self._changing:
            if self.failed is not None or self.part.writer is not self:
                return
            if node not in self.ledger.ensemble_for(self.next_eid):
                return
            if node in self.down:
                return
            log.warning("%s: storage node %s failed (%s)", self.part.name, node, why)
            current = self.ledger.ensemble_for(self.next_eid)
            spare = [
                n.node_id
                for n in self.store.nodes.writable()
                if n.node_id not in current and n.node_id not in self.down
            ]
            if spare:
                replacement = random.choice(spare)
                nodes = [replacement if n == node else n for n in current]
                first = self.lac + 1
                ensembles = [(f, ns) for f, ns in self.ledger.ensembles if f < first]
                try:
                    await self.part.save(
                        replace_ledger=dataclasses.replace(
                            self.ledger, ensembles=[*ensembles, (first, nodes)]
                        )
                    )
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
                    self.part.name,
                    self.ledger.ledger_id,
                    first,
                    nodes,
                )
            else:
                self.down.add(node)
            for eid, add in list(self.pending.items()):
                add.acks.discard(node)
                for target in self.ledger.write_set(eid):
                    if target not in self.down and target not in add.sent:
                        self._send(add, target)
                self._check_quorum_possible(add)
                if self.failed is not None:
                    return
            self._complete()

    def fail(self, error: StorageError) -> None:
        if self.failed is None:
            self.failed = error
            log.warning("%s: ledger %d failed: %s", self.part.name, self.ledger.ledger_id, error)
        for add in self.pending.values():
            if not add.done.done():
                add.done.set_exception(error)
                add.done.exception()
        self.pending.clear()
        self.drained.set()


class _Partition:
    """One partition's ledgers, from its metadata node; the writer of its OPEN ledger."""

    def __init__(self, store: ReplicatedStorage, name: str) -> None:
        self.store = store
        self.name = name
        self.path = f"{ROOT}/{quote(name, safe='')}"
        self.ledgers: list[Ledger] = []
        self.version = -1
        self.start = 0  # first retained offset
        self.writer: _Writer | None = None
        self.end = 0
        self.lock = asyncio.Lock()  # one append (assign + send) or roll at a time
        self.tail = _Tail(TAIL_BYTES)
        self.fenced: LedgerFencedError | None = None
        self._saving = asyncio.Lock()  # metadata writes one at a time (their versions chain)

    # -- metadata -----------------------------------------------------------------------

    async def load(self) -> bool:
        node = await self.store.meta.get(self.path)
        if node is None:
            return False
        d = json.loads(node.value)
        self.version = node.stat.version
        self.start = d["start"]
        self.ledgers = [Ledger.from_json(x) for x in d["ledgers"]]
        last = self.ledgers[-1] if self.ledgers else None
        self.end = last.info.end_offset if last else self.start
        return True

    def _body(self, ledgers: list[Ledger]) -> bytes:
        return json.dumps(
            {"start": self.start, "ledgers": [lg.to_json() for lg in ledgers]}
        ).encode()

    async def save(
        self, *, replace_ledger: Ledger | None = None, ledgers: list[Ledger] | None = None
    ) -> None:
        """Write the segment list (with ``replace_ledger`` in place of its namesake) by
        compare-and-set; a lost race means another writer took the partition."""
        async with self._saving:
            await self._save(replace_ledger, ledgers)

    async def _save(self, replace_ledger: Ledger | None, ledgers: list[Ledger] | None) -> None:
        if self.fenced is not None:
            raise self.fenced
        new = list(ledgers if ledgers is not None else self.ledgers)
        if replace_ledger is not None:
            new = [replace_ledger if lg.ledger_id == replace_ledger.ledger_id else lg for lg in new]
        try:
            stat = await self.store.meta.put(
                self.path, self._body(new), expected_version=self.version
            )
        except (BadVersionError, NodeExistsError):
            self.fenced = LedgerFencedError(
                f"the segment list of {self.name} was changed by another writer: this broker "
                "no longer owns the topic"
            )
            if self.writer is not None:
                self.writer.fail(self.fenced)
            raise self.fenced from None
        self.version = stat.version

    # -- ledgers --------------------------------------------------------------------------

    async def new_ledger(self) -> None:
        """Append a fresh OPEN ledger on E writable nodes (durable in metadata)."""
        e, qw, qa = await self.store.quorum_for(self.name)
        nodes = self.store.nodes.writable()
        # Like Pulsar's managed ledger, wait a while for nodes (one may be restarting)
        # before failing the appends that need the new ledger.
        deadline = self.store.clock.monotonic() + self.store.settings.add_timeout_ms / 1000
        while len(nodes) < e and self.store.clock.monotonic() < deadline:
            await asyncio.sleep(0.2)
            await self.store.nodes.refresh()
            nodes = self.store.nodes.writable()
        if len(nodes) < e:
            raise NotEnoughStorageNodesError(
                f"{self.name}: a new ledger needs {e} writable storage nodes, "
                f"{len(nodes)} are registered ({', '.join(n.node_id for n in nodes) or 'none'}); "
                "start storage nodes and retry"
            )
        ensemble = [n.node_id for n in random.sample(nodes, e)]
        lid = await self.store.next_ledger_id(self.ledgers[-1].ledger_id if self.ledgers else 0)
        now = self.store.clock.now_ms()
        info = SegmentInfo(lid, 0, SegmentState.OPEN, self.end, self.end, created_ms=now)
        ledger = Ledger(info, (e, qw, qa), [(0, ensemble)], -1, array.array("q"), array.array("q"))
        await self.save(ledgers=[*self.ledgers, ledger])
        self.ledgers.append(ledger)
        self.writer = _Writer(self.store, self, ledger)

    async def close_open(self) -> None:
        """Close the OPEN ledger at its last confirmed entry (after in-flight adds end)."""
        writer = self.writer
        if writer is None:
            return
        await writer.drained.wait()
        ledger = writer.ledger
        closed = dataclasses.replace(
            ledger,
            info=dataclasses.replace(
                ledger.info,
                state=SegmentState.CLOSED,
                end_offset=self.end,
                closed_ms=self.store.clock.now_ms(),
            ),
            last_entry=writer.lac,
        )
        await self.save(replace_ledger=closed)  # if this fails the writer stays: retried
        self.writer = None
        ledger.info, ledger.last_entry = closed.info, closed.last_entry

    def confirmed(self, ledger: Ledger, r: Record) -> Entry:
        """Account for an acknowledged entry; it joins the tail cache."""
        entry = r.entry(ledger.ledger_id)
        info = ledger.info
        info.end_offset = entry.next_offset
        info.entries += 1
        info.size += entry.stored_size
        if info.first_publish_time == NO_TIME:
            info.first_publish_time = r.publish_time
        info.max_publish_time = max(info.max_publish_time, r.publish_time)
        assert ledger.bases is not None and ledger.times is not None
        ledger.bases.append(r.base_offset)
        ledger.times.append(r.publish_time)
        self.tail.append(entry)
        return entry

    def should_roll(self, ledger: Ledger) -> bool:
        """Whether the open ledger is due to be closed for a new one. Not while fewer than E
        storage nodes are writable: the new ledger could not be formed and every append
        would fail until one comes back, while the open ledger still takes writes at its
        ack quorum (a size limit is a policy, not a promise); it rolls once nodes are back."""
        s = self.store.settings
        info = ledger.info
        if len(self.store.nodes.writable()) < ledger.quorum[0]:
            return False
        if info.size >= s.segment_max_bytes:
            return True
        if s.segment_max_entries and info.entries >= s.segment_max_entries:
            return True
        age = self.store.clock.now_ms() - info.created_ms
        return bool(s.segment_max_age and info.entries and age >= s.segment_max_age * 1000)

    def ledger_at(self, offset: int) -> Ledger:
        if offset < self.start or not self.ledgers:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.name} is before its first retained offset {self.start}"
            )
        firsts = [lg.info.first_offset for lg in self.ledgers]
        i = bisect.bisect_right(firsts, offset) - 1
        while i > 0 and self.ledgers[i].info.is_empty:
            i -= 1
        return self.ledgers[max(i, 0)]


class ReplicatedStorage:
    """``LedgerStorage`` over storage nodes. Create with :meth:`open`."""

    def __init__(self, settings: Settings, meta: MetadataStore, clock: Clock) -> None:
        self.settings = settings
        self.meta = meta
        self.clock = clock
        self.quorum = (settings.ensemble_size, settings.write_quorum, settings.ack_quorum)
        self.nodes = NodeDirectory(meta, settings.add_timeout_ms / 1000, settings.peer_tls_context)
        self._parts: dict[str, _Partition] = {}
        self._ids: list[int] = []
        self._ids_lock = asyncio.Lock()
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

    async def next_ledger_id(self, above: int) -> int:
        """A ledger id no broker ever had, larger than ``above`` (the partition's last).

        A topic's ledger ids must grow with its offsets: they are the ledger part of Pulsar
        message ids, which clients compare (a reader drops what sorts before what it has
        seen). Each broker reserves blocks of ids, so a topic that moves from a broker with a
        newer block to one with an older block would go backwards: then the older block is
        dropped and a new one, above every id handed out so far, is reserved.
        """
        async with self._ids_lock:
            if not self._ids or self._ids[-1] <= above:
                first = await reserve_block(self.meta, LEDGER_IDS, 100) + 1  # ids from 1
                self._ids = list(range(first + 99, first - 1, -1))
            return self._ids.pop()

    def partitions(self) -> list[str]:
        return sorted(self._parts)

    def _part(self, name: str) -> _Partition:
        part = self._parts.get(name)
        if part is None:
            raise PartitionNotFoundError(f"no partition {name!r}")
        return part

    # -- partitions ---------------------------------------------------------------------

    async def create_partition(self, name: str) -> None:
        """Open the partition (recovering its last ledger if its writer died) or create it."""
        if name in self._parts:
            return
        part = _Partition(self, name)
        if await part.load():
            last = part.ledgers[-1] if part.ledgers else None
            if last is not None and last.info.state is SegmentState.OPEN:
                await self._recover(part, last)
        else:
            await part.save(ledgers=[])
        self._parts[name] = part

    async def delete_partition(self, name: str) -> None:
        part = self._part(name)
        async with part.lock:
            if part.writer is not None:
                part.writer.fail(StorageError(f"partition {name} was deleted"))
            for ledger in part.ledgers:
                await self._delete_ledger(ledger)
            del self._parts[name]
            with contextlib.suppress(Exception):
                await self.meta.delete(part.path)

    async def unload(self, name: str) -> None:
        """Close ``name``'s open ledger at its end and forget it: the next owner opens it
        without recovery."""
        part = self._parts.get(name)
        if part is None:
            return
        async with part.lock:
            if part.writer is not None and part.writer.failed is None:
                await part.close_open()
            self._parts.pop(name, None)
            # an append that still holds this object must not open a ledger behind the
            # next owner's back
            part.fenced = LedgerFencedError(f"{name} was unloaded: another broker serves it")

    def release(self, name: str) -> None:
        """Forget ``name`` (ownership lost): its writer fails what is in flight, nothing is
        closed — the next owner fences and recovers the open ledger."""
        part = self._parts.pop(name, None)
        if part is not None and part.writer is not None:
            part.writer.fail(LedgerFencedError(f"{name} moved to another broker"))

    def has_partition(self, name: str) -> bool:
        return name in self._parts

    def serves_ledger(self, ledger_id: int) -> bool:
        """Whether a partition this broker serves has the ledger."""
        return any(lg.ledger_id == ledger_id for p in self._parts.values() for lg in p.ledgers)

    def end_offset(self, name: str) -> int:
        return self._part(name).end

    def start_offset(self, name: str) -> int:
        return self._part(name).start

    def segments(self, name: str) -> list[SegmentInfo]:
        part = self._part(name)
        return [dataclasses.replace(lg.info) for lg in part.ledgers]

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
        part = self._part(name)
        ts = self.clock.now_ms() if publish_time is None else publish_time
        check_header_fields(count, ts, event_time, fmt, len(payload))
        async with part.lock:
            if part.fenced is not None:
                raise part.fenced
            writer = part.writer
            if writer is not None and writer.failed is not None:
                # nothing above its lac was acknowledged: end the ledger there, start anew
                part.end = writer.ledger.info.end_offset
                if isinstance(writer.failed, LedgerFencedError):
                    raise writer.failed
                await part.close_open()
                writer = None
            elif writer is not None and part.should_roll(writer.ledger):
                await part.close_open()
                writer = None
            if writer is None:
                await part.new_ledger()
                writer = part.writer
                assert writer is not None
            record = Record(writer.next_eid, part.end, count, ts, event_time, fmt, payload)
            writer.next_eid += 1
            part.end += count
            fut = writer.add(record)
        try:
            return await fut
        except StorageError:
            async with part.lock:  # later entries of this ledger failed too: rewind
                if part.writer is writer and writer.failed is not None:
                    part.end = writer.ledger.info.end_offset
            raise

    # -- recovery -----------------------------------------------------------------------

    async def _recover(self, part: _Partition, ledger: Ledger) -> None:
        """Fence the previous writer's ledger, find its end, write its tail back, close it."""
        lid = ledger.ledger_id
        e, qw, qa = ledger.quorum
        nodes = ledger.ensembles[-1][1]
        answers = await asyncio.gather(
            *(self.nodes.call(n, Op.FENCE, LEDGER.pack(lid)) for n in nodes),
            return_exceptions=True,
        )
        fenced_at = {
            n: LAC.unpack(a[1])[0]
            for n, a in zip(nodes, answers, strict=True)
            if isinstance(a, tuple) and a[0] == Status.OK and len(a[1]) == LAC.size
        }
        for n, a in zip(nodes, answers, strict=True):
            if n not in fenced_at:
                log.warning("%s: storage node %s did not fence ledger %d: %s", part.name, n, lid, a)
        fenced = set(fenced_at)
        for start in range(e):  # every write quorum must have lost its ack quorum
            quorum = {nodes[(start + k) % e] for k in range(qw)}
            if len(quorum & fenced) < qw - qa + 1:
                raise NotEnoughStorageNodesError(
                    f"cannot recover ledger {lid} of {part.name}: storage nodes "
                    f"{sorted(set(nodes) - fenced)} did not answer; retry when they are back"
                )
        lac = max([*fenced_at.values(), ledger.last_entry])
        last_record = await self._read_one(ledger, lac) if lac >= 0 else None
        eid = lac + 1
        while True:
            found = await self._probe(ledger, eid)
            if found is None:
                break
            for node in ledger.write_set(eid):  # back to its full write quorum
                body = ADD.pack(lid, lac, FLAG_RECOVERY) + found.pack()
                with contextlib.suppress(NodeUnavailableError):
                    await self.nodes.call(node, Op.ADD, body)
            last_record, eid = found, eid + 1
        end = (
            last_record.base_offset + last_record.count if last_record else ledger.info.first_offset
        )
        closed = dataclasses.replace(
            ledger,
            info=dataclasses.replace(
                ledger.info,
                state=SegmentState.CLOSED,
                end_offset=end,
                entries=eid,
                closed_ms=self.clock.now_ms(),
            ),
            last_entry=eid - 1,
        )
        await part.save(replace_ledger=closed)
        part.ledgers[-1] = closed
        part.end = end
        self.stats["recoveries"] += 1
        log.warning(
            "%s: recovered ledger %d of a previous writer: closed at entry %d (offset %d)",
            part.name,
            lid,
            eid - 1,
            end,
        )

    async def _probe(self, ledger: Ledger, eid: int) -> Record | None:
        """Entry ``eid`` if any replica has it; None once enough replicas say it is absent
        that it cannot have been acknowledged (Qw − Qa + 1 of its write quorum)."""
        _, qw, qa = ledger.quorum
        absent = 0
        for node in ledger.write_set(eid):
            try:
                status, body = await self.nodes.call(
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

    async def _read_one(self, ledger: Ledger, eid: int) -> Record:
        got = await self._read_records(ledger, eid, eid, 64 << 20)
        if not got:
            raise StorageError(f"entry {eid} of ledger {ledger.ledger_id} is on no storage node")
        return got[0]

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset``; [] at the end. Never past the last
        confirmed entry; from any replica, the next on error."""
        part = self._part(name)
        if offset >= part.end:
            if offset > part.end:
                raise OffsetOutOfRangeError(f"offset {offset} is past the end of {name}")
            return []
        if offset < part.start:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {name} is before its first retained offset {part.start}"
            )
        cached = part.tail.read(offset, max_entries, max_bytes)
        if cached is not None:
            return cached
        ledger = part.ledger_at(offset)
        if offset >= ledger.info.end_offset:  # an empty ledger between: try the next
            return []
        if not ledger.info.local:
            raise SegmentNotLocalError(
                f"segment {ledger.ledger_id} of {name} is offloaded", ledger.ledger_id
            )
        bases = await self._index(ledger)
        eid = bisect.bisect_right(bases, offset) - 1
        last = min(ledger.last_entry, eid + max_entries - 1)
        records = await self._read_records(ledger, eid, last, max_bytes)
        return [r.entry(ledger.ledger_id) for r in records]

    async def _read_records(
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
                    status, body = await self.nodes.call(
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
                    self.repairs.met(ledger, node, problem)
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
        part = self._part(name)
        return await self.repairs.check(list(part.ledgers), repair=repair)

    async def next_readable(self, name: str, offset: int) -> int:
        """The next entry's first offset (reads of an entry go to every replica first)."""
        ledger = self._part(name).ledger_at(offset)
        bases = await self._index(ledger)
        eid = bisect.bisect_right(bases, offset) - 1
        return int(bases[eid + 1]) if eid + 1 < len(bases) else ledger.info.end_offset

    def damaged(self, name: str) -> dict[int, str]:
        """Ledgers of ``name`` with a damaged or incomplete replica not yet repaired."""
        part = self._part(name)
        return self.repairs.damaged({lg.ledger_id for lg in part.ledgers})

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        """Where a reader may fetch a closed segment straight from storage nodes: one
        ``{"first", "end", "flight": [URLs]}`` per ensemble fragment, every listed node
        holding the whole fragment. None when no node holds whole fragments (striping,
        E > Qw) or the segment is open: read it through the broker then."""
        part = self._part(name)
        ledger = next((lg for lg in part.ledgers if lg.ledger_id == segment_id), None)
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
        part = self._part(name)
        for ledger in part.ledgers:
            if ledger.info.is_empty or ledger.info.max_publish_time < ts:
                continue
            found = await self.find_in_segment(name, ledger.ledger_id, ts)
            if found is not None:
                return found
        return part.end

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None:
        part = self._part(name)
        ledger = next((lg for lg in part.ledgers if lg.ledger_id == segment_id), None)
        if ledger is None or ledger.info.is_empty:
            return None
        bases, times = await self._index_arrays(ledger)
        for base, t in zip(bases, times, strict=False):
            if t >= ts:
                return int(base)
        return None

    # -- segment records ----------------------------------------------------------------

    async def update_segment(self, name: str, segment_id: int, **changes: Any) -> SegmentInfo:
        part = self._part(name)
        async with part.lock:
            ledger = next((lg for lg in part.ledgers if lg.ledger_id == segment_id), None)
            if ledger is None:
                raise StorageError(f"no segment {segment_id} in {name}")
            if ledger.info.state is SegmentState.OPEN:
                raise StorageError(f"segment {segment_id} of {name} is still open")
            changed = dataclasses.replace(ledger, info=dataclasses.replace(ledger.info, **changes))
            await part.save(replace_ledger=changed)
            ledger.info = changed.info
            return dataclasses.replace(ledger.info)

    async def drop_local_copy(self, name: str, segment_id: int) -> None:
        """Delete an OFFLOADED ledger's entries from the storage nodes."""
        info = await self.update_segment(name, segment_id, local=False)
        ledger = next(lg for lg in self._part(name).ledgers if lg.ledger_id == info.segment_id)
        await self._delete_ledger(ledger)

    async def trim(self, name: str, before: int) -> list[SegmentInfo]:
        part = self._part(name)
        async with part.lock:
            doomed: list[Ledger] = []
            for ledger in part.ledgers[:-1]:
                if ledger.info.end_offset > before or ledger.info.state in (
                    SegmentState.OPEN,
                    SegmentState.OFFLOADING,
                ):
                    break
                doomed.append(ledger)
            if not doomed:
                return []
            kept = part.ledgers[len(doomed) :]
            old_start, part.start = part.start, kept[0].info.first_offset
            try:
                await part.save(ledgers=kept)
            except BaseException:
                part.start = old_start
                raise
            part.ledgers = kept
        for ledger in doomed:
            await self._delete_ledger(ledger)
        return [dataclasses.replace(lg.info, state=SegmentState.DELETED) for lg in doomed]

    async def _delete_ledger(self, ledger: Ledger) -> None:
        self.repairs.forget(ledger.ledger_id)
        for node in {n for _, ns in ledger.ensembles for n in ns}:
            try:
                await self.nodes.call(node, Op.DELETE, LEDGER.pack(ledger.ledger_id))
            except NodeUnavailableError as e:  # its copy is garbage now; logged for the operator
                log.warning("ledger %d: delete on %s failed: %s", ledger.ledger_id, node, e)

    async def roll(self, name: str) -> bool:
        part = self._part(name)
        async with part.lock:
            if part.writer is None or part.writer.ledger.info.entries == 0:
                return False
            await part.close_open()
            return True

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
            for ledger in list(part.ledgers):
                if ledger.info.state is SegmentState.OPEN or not ledger.info.local:
                    continue
                named = {n for _, ns in ledger.ensembles for n in ns}
                lost = sorted(n for n in named if self.nodes.gone_for(n) > grace)
                if lost:
                    found[ledger.ledger_id] = lost
        self.under_replicated = found
        await self.repairs.retry()
        for part in list(self._parts.values()):
            for ledger in list(part.ledgers):
                if ledger.ledger_id in found:
                    await self._rereplicate(part, ledger, found[ledger.ledger_id])
                    self.under_replicated.pop(ledger.ledger_id, None)

    async def _rereplicate(self, part: _Partition, ledger: Ledger, lost: list[str]) -> None:
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
                async with part.lock:
                    changed = dataclasses.replace(ledger, ensembles=list(ensembles))
                    await part.save(replace_ledger=changed)
                    ledger.ensembles = changed.ensembles
                self.stats["rereplicated_entries"] += copied
                self.stats["rereplicated_fragments"] += 1
                log.warning(
                    "ledger %d of %s: entries %d..%d of lost node %s re-replicated to %s "
                    "(%d copied)",
                    ledger.ledger_id,
                    part.name,
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
            batch = await self._read_records(ledger, eid, min(end, eid + 999), 8 << 20)
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
            if part.writer is not None and part.writer.failed is None:
                with contextlib.suppress(StorageError):
                    async with part.lock:
                        await part.close_open()
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
