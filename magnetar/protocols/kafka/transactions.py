"""Kafka transactions (KIP-98): the transaction coordinator.

A transactional producer finds this node as its coordinator, gets a producer id and a new
epoch (InitProducerId), names the partitions (AddPartitionsToTxn) and groups
(AddOffsetsToTxn) its transaction writes to, stages group offsets (TxnOffsetCommit) and ends
it (EndTxn). Ending writes a control batch (a COMMIT or ABORT marker) to every partition of
the transaction; a committed transaction's staged offsets are then committed for real.
Readers with ``isolation.level=read_committed`` see a partition only up to its last stable
offset and skip aborted batches (see ``fetch`` and ``ProducerStates``).

State per transactional id (:class:`Txn`) is durable: it is written to the metadata store
(``/kafka/transactions/<id>``) before each answer, and loaded when the server starts. A
transaction in PREPARE_* when the server stopped has its markers written again (a marker
written twice is harmless: readers act on the first). One left ONGOING past its timeout is
aborted, and the producer's epoch bumped so the abandoned producer is fenced.

Offsets staged by TxnOffsetCommit live beside it (``/kafka/txn-offsets/<id>/<group>``),
tagged with the transaction's number: the group coordinator writes them, which on several
brokers need not be the transaction coordinator, and a commit applies only its own.

On several brokers (``owns`` given) each transactional id is coordinated by the broker
owning the bundle of its coordinator name (``groups.find_coordinator``). The stored node is
then the truth: it is read again before each change and written by compare-and-set on its
version, so a broker that lost the id (its session ended, the bundle moved) fails its write
with NOT_COORDINATOR instead of overwriting the new coordinator's state. A sweep loads the
ids a broker has come to coordinate, finishing their PREPARE_* transactions and arming the
timeouts of ONGOING ones, so nothing waits for its producer to come back. Partition owners
check a transactional batch against the stored node (KIP-890's verification).

Lifecycle: EMPTY → ONGOING (a partition or group added) → PREPARE_COMMIT / PREPARE_ABORT
(EndTxn, or the timeout: markers being written) → COMPLETE_COMMIT / COMPLETE_ABORT → ONGOING
again with the next transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from magnetar.broker.records import BadVersionError, NodeExistsError, NotFoundError, RecordStore
from magnetar.protocols.kafka.errors import ErrorCode, RefusedError

log = logging.getLogger(__name__)
SWEEP_S = 2.0  # how often a broker of several looks for ids it has come to coordinate
MAX_TIMEOUT_MS = 15 * 60_000  # Kafka's transaction.max.timeout.ms
TopicPartition = tuple[str, int]
# (topic, partition, offset, metadata, leader epoch)
Offsets = list[tuple[str, int, int, str | None, int]]
# writes one marker to a partition: (topic, partition, producer id, epoch, commit)
MarkerWriter = Callable[[str, int, int, int, bool], Awaitable[None]]
# commits a group's offsets: (group, offsets)
OffsetWriter = Callable[[str, Offsets], Awaitable[None]]
# whether this broker coordinates a transactional id (several brokers); with take=True it
# becomes its coordinator if no live broker is
Owns = Callable[[str, bool], Awaitable[bool]]
ACTIVE = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


class TxnState(enum.StrEnum):
    EMPTY = "Empty"  # a producer id and epoch, no transaction yet
    ONGOING = "Ongoing"  # partitions or groups added; writes under way
    PREPARE_COMMIT = "PrepareCommit"  # EndTxn(commit) taken: writing COMMIT markers
    PREPARE_ABORT = "PrepareAbort"  # EndTxn(abort) or a timeout: writing ABORT markers
    COMPLETE_COMMIT = "CompleteCommit"  # markers written, offsets committed
    COMPLETE_ABORT = "CompleteAbort"  # markers written, staged offsets dropped


class TxnError(RefusedError):
    code = "kafka.transaction"


@dataclass(eq=False)
class Txn:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: list[TopicPartition] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    started_ms: int = 0
    number: int = 0  # transactions begun under this id; tags the offsets staged for one

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Txn:
        raw = json.loads(data)
        raw.pop("offsets", None)  # staged in the node itself before 2026-11: not kept
        raw["state"] = TxnState(raw["state"])
        raw["partitions"] = [tuple(p) for p in raw["partitions"]]
        return cls(**raw)


def txn_key(tid: str) -> str:
    """Its record's key (the broker's RecordKind.KAFKA_TRANSACTIONS)."""
    return quote(tid, safe="")


def staged_key(tid: str, group: str) -> str:
    """The key of its offsets staged for ``group`` (RecordKind.KAFKA_TXN_OFFSETS)."""
    return f"{quote(tid, safe='')}/{quote(group, safe='')}"


def _moved(tid: str) -> TxnError:
    return TxnError(
        ErrorCode.NOT_COORDINATOR,
        f"transactional id {tid!r} is coordinated by another broker now: find it again",
    )


class TransactionCoordinator:
    """The transactional ids this node coordinates: all of them on one node, those whose
    coordinator name's bundle it owns (``owns``) on several brokers."""

    def __init__(
        self,
        records: RecordStore,  # the broker's RecordKind.KAFKA_TRANSACTIONS
        staged: RecordStore,  # RecordKind.KAFKA_TXN_OFFSETS
        new_producer_id: Callable[[], Awaitable[int]],
        write_marker: MarkerWriter,
        commit_offsets: OffsetWriter,
        owns: Owns | None = None,
    ) -> None:
        self.records = records
        self.staged = staged
        self._new_producer_id = new_producer_id
        self._write_marker = write_marker
        self._commit_offsets = commit_offsets
        self._owns = owns
        self.txns: dict[str, Txn] = {}
        self._versions: dict[str, int] = {}  # the stored node's version each txn was read at
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._verified: set[tuple[int, int, str, int]] = set()  # (pid, epoch, topic, index)

    @property
    def shared(self) -> bool:
        """True on several brokers: the stored node, not memory, is the truth."""
        return self._owns is not None

    async def start(self) -> None:
        """Load every stored transaction this node coordinates; finish those caught mid-way;
        arm the timeouts. On several brokers, keep doing so as ids come and go."""
        if self.shared:
            self._spawn(self._sweep_loop())
            return
        for tid in await self._stored_ids():
            await self._adopt(tid)

    async def _stored_ids(self) -> list[str]:
        return [unquote(name) for name in await self.records.keys()]

    async def _adopt(self, tid: str) -> None:
        """Take up a stored transaction: finish it if it was ending, time it if open."""
        txn = await self._load(tid)
        if txn is None:
            return
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._spawn(self._finish_locked(txn))
        elif txn.state is TxnState.ONGOING:
            self._arm(txn)

    async def _sweep_loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("looking for transactional ids to coordinate failed; retrying")
            await asyncio.sleep(SWEEP_S)

    async def sweep(self) -> None:
        """Forget the ids this broker no longer coordinates; adopt each open or ending
        transaction that no live broker coordinates (taking its coordinator name's bundle),
        so it is finished or timed out even if its producer never comes back."""
        assert self._owns is not None
        for tid in await self._stored_ids():
            if tid in self.txns:
                if not await self._owns(tid, False):
                    self._forget(tid)
                continue
            node = await self.records.get(txn_key(tid))
            if node is None or Txn.from_bytes(node.value).state.value not in ACTIVE:
                continue
            if await self._owns(tid, True):
                async with self._lock(tid):
                    await self._adopt(tid)

    def _forget(self, tid: str) -> None:
        self.txns.pop(tid, None)
        self._versions.pop(tid, None)
        timer = self._timers.pop(tid, None)
        if timer is not None:
            timer.cancel()

    def _lock(self, tid: str) -> asyncio.Lock:
        return self._locks.setdefault(tid, asyncio.Lock())

    async def _load(self, tid: str) -> Txn | None:
        """The stored state of ``tid`` (None if there is none), now this node's copy."""
        node = await self.records.get(txn_key(tid))
        if node is None:
            self._forget(tid)
            return None
        txn = self.txns[tid] = Txn.from_bytes(node.value)
        self._versions[tid] = node.version
        return txn

    async def _fresh(self, tid: str) -> Txn | None:
        """This node's copy of ``tid``; on several brokers read again from the store first."""
        if self.shared:
            return await self._load(tid)
        return self.txns.get(tid)

    async def _save(self, txn: Txn) -> None:
        tid = txn.transactional_id
        if not self.shared:
            await self.records.put(txn_key(tid), txn.to_bytes())
            return
        try:
            version = await self.records.put(
                txn_key(tid), txn.to_bytes(), expected_version=self._versions.get(tid, -1)
            )
        except (BadVersionError, NodeExistsError, NotFoundError):
            self._forget(tid)  # another broker wrote it: it coordinates this id now
            raise _moved(tid) from None
        self._versions[tid] = version

    # -- InitProducerId ---------------------------------------------------------------------

    async def init_producer(self, tid: str, timeout_ms: int) -> tuple[int, int]:
        """(producer id, epoch) for ``tid``: a new id, or the old one with the next epoch,
        which fences the previous producer; its unfinished transaction is aborted first."""
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise TxnError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms {timeout_ms} is outside 1..{MAX_TIMEOUT_MS}",
            )
        async with self._lock(tid):
            txn = await self._fresh(tid)
            if txn is None:
                txn = Txn(tid, await self._new_producer_id(), 0, timeout_ms)
            else:
                if txn.state in (TxnState.ONGOING, TxnState.PREPARE_ABORT):
                    await self._end(txn, commit=False)
                elif txn.state is TxnState.PREPARE_COMMIT:
                    await self._end(txn, commit=True)
                txn.epoch += 1
                if txn.epoch >= 32767:  # epochs are int16: start over with a new id
                    txn.producer_id, txn.epoch = await self._new_producer_id(), 0
                txn.timeout_ms, txn.state = timeout_ms, TxnState.EMPTY
            self.txns[tid] = txn
            await self._save(txn)
            return txn.producer_id, txn.epoch

    # -- adding partitions and groups ----------------------------------------------------

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: list[TopicPartition]
    ) -> None:
        async with self._lock(tid):
            txn = self._current(tid, await self._fresh(tid), producer_id, epoch)
            new = [p for p in partitions if p not in txn.partitions]
            if not new and txn.state is TxnState.ONGOING:
                return
            self._begin(txn)
            txn.partitions += new
            await self._save(txn)

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> None:
        async with self._lock(tid):
            txn = self._current(tid, await self._fresh(tid), producer_id, epoch)
            self._begin(txn)
            if group not in txn.groups:
                txn.groups.append(group)
            await self._save(txn)

    async def stage_offsets(
        self, tid: str, producer_id: int, epoch: int, group: str, offsets: Offsets
    ) -> None:
        """TxnOffsetCommit, at the group's coordinator: offsets committed if and when the
        transaction commits. The transaction is read from the store (its coordinator may be
        another broker); the offsets are kept beside it under its number."""
        node = await self.records.get(txn_key(tid))
        txn = self._current(tid, Txn.from_bytes(node.value) if node else None, producer_id, epoch)
        if txn.state is not TxnState.ONGOING or group not in txn.groups:
            raise TxnError(
                ErrorCode.INVALID_TXN_STATE,
                f"group {group!r} was not added to the transaction (AddOffsetsToTxn)",
            )
        async with self._lock(f"{tid}\0{group}"):
            staged = {(o[0], o[1]): o for o in await self._staged(tid, group, txn)}
            staged.update({(o[0], o[1]): o for o in offsets})
            body = {"producerId": producer_id, "number": txn.number,
                    "offsets": list(staged.values())}  # fmt: skip
            await self.staged.put(staged_key(tid, group), json.dumps(body).encode())

    async def _staged(self, tid: str, group: str, txn: Txn) -> Offsets:
        """The offsets staged for ``group`` by the transaction ``txn`` (none of another)."""
        node = await self.staged.get(staged_key(tid, group))
        if node is None:
            return []
        body = json.loads(node.value)
        if body["producerId"] != txn.producer_id or body["number"] != txn.number:
            return []  # left by an earlier transaction that never finished
        return [tuple(o) for o in body["offsets"]]

    def _current(self, tid: str, txn: Txn | None, producer_id: int, epoch: int) -> Txn:
        """``txn`` (the state of ``tid``) if (producer id, epoch) are its current ones."""
        if txn is None or txn.producer_id != producer_id:
            raise TxnError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not transactional id {tid!r}'s: InitProducerId",
            )
        if epoch != txn.epoch:
            raise TxnError(
                ErrorCode.PRODUCER_FENCED,
                f"epoch {epoch} of transactional id {tid!r} is fenced by epoch {txn.epoch}",
            )
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, "the last transaction is ending")
        return txn

    def _begin(self, txn: Txn) -> None:
        if txn.state is not TxnState.ONGOING:
            txn.state, txn.started_ms = TxnState.ONGOING, int(time.time() * 1000)
            txn.partitions, txn.groups = [], []
            txn.number += 1
            self._arm(txn)

    # -- ending ------------------------------------------------------------------------

    async def end(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: durable (markers written, offsets committed) when this returns."""
        async with self._lock(tid):
            txn = await self._fresh(tid)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            ending = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if txn is not None and txn.producer_id == producer_id and txn.epoch == epoch:
                if txn.state is done:
                    return  # a retry of the EndTxn that ended it
                if txn.state is ending:  # a retry after markers failed, or a new coordinator
                    await self._finish(txn)
                    return
                if txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT):  # fmt: skip
                    if not commit and txn.state is TxnState.EMPTY:
                        return  # aborting nothing
                    raise TxnError(
                        ErrorCode.INVALID_TXN_STATE, f"no transaction is open ({txn.state})"
                    )
            txn = self._current(tid, txn, producer_id, epoch)
            await self._end(txn, commit)

    async def _end(self, txn: Txn, commit: bool) -> None:
        timer = self._timers.pop(txn.transactional_id, None)
        if timer is not None:
            timer.cancel()
        txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        await self._save(txn)
        await self._finish(txn)

    async def _finish(self, txn: Txn) -> None:
        """Write the markers (and commit the offsets) of a PREPARE_* transaction."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        # all at once: the partitions' appends share the journal's group commits
        await asyncio.gather(
            *(
                self._write_marker(topic, index, txn.producer_id, txn.epoch, commit)
                for topic, index in txn.partitions
            )
        )
        tid = txn.transactional_id
        for group in txn.groups:
            if commit and (offsets := await self._staged(tid, group, txn)):
                await self._commit_offsets(group, offsets)
            with contextlib.suppress(NotFoundError):
                await self.staged.delete(staged_key(tid, group))
        txn.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        txn.partitions, txn.groups = [], []
        await self._save(txn)

    async def _finish_locked(self, txn: Txn) -> None:
        tid = txn.transactional_id
        async with self._lock(tid):
            if self.shared:
                txn = await self._load(tid) or txn
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                await self._finish(txn)

    # -- timeouts --------------------------------------------------------------------------

    def _arm(self, txn: Txn) -> None:
        old = self._timers.pop(txn.transactional_id, None)
        if old is not None:
            old.cancel()
        left = txn.started_ms + txn.timeout_ms - time.time() * 1000
        self._timers[txn.transactional_id] = asyncio.get_running_loop().call_later(
            max(left, 0) / 1000, lambda: self._spawn(self._expire(txn.transactional_id))
        )

    async def _expire(self, tid: str) -> None:
        """A transaction left open past its timeout is aborted and its producer fenced."""
        async with self._lock(tid):
            txn = await self._fresh(tid) if tid in self.txns else None
            if txn is None or txn.state is not TxnState.ONGOING:
                return
            if txn.started_ms + txn.timeout_ms > time.time() * 1000:
                self._arm(txn)  # another transaction began since this timer was set
                return
            log.warning("transaction %r (producer %d) timed out: aborted", tid, txn.producer_id)
            self._timers.pop(tid, None)
            txn.state = TxnState.PREPARE_ABORT
            txn.epoch += 1  # fences the abandoned producer; its markers carry the new epoch
            await self._save(txn)
            await self._finish(txn)

    def _spawn(self, job: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await job
            except Exception:
                log.exception("finishing a Kafka transaction failed; it is retried at restart")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def accepts(
        self, tid: str | None, producer_id: int, epoch: int, topic: str, index: int
    ) -> bool:
        """Whether a transactional batch of (producer id, epoch) may be written to the
        partition: its transaction is open and added the partition (KIP-890's check, so a
        fenced or confused producer cannot open a transaction no marker will ever close).
        On several brokers the partition's owner asks the store (the coordinator may be
        another broker); a yes holds until a marker of the producer reaches the partition."""

        def fits(t: Txn) -> bool:
            return (
                t.producer_id == producer_id
                and t.epoch == epoch
                and t.state is TxnState.ONGOING
                and (topic, index) in t.partitions
            )

        if not self.shared:
            return any(fits(t) for t in self.txns.values())
        key = (producer_id, epoch, topic, index)
        if key in self._verified:
            return True
        node = await self.records.get(txn_key(tid)) if tid else None
        if node is None or not fits(Txn.from_bytes(node.value)):
            return False
        self._verified.add(key)
        return True

    def marker_written(self, producer_id: int, topic: str, index: int) -> None:
        """A marker of ``producer_id`` reached the partition: its next batch is verified."""
        self._verified = {
            k for k in self._verified if not (k[0] == producer_id and k[2:] == (topic, index))
        }

    def describe(self) -> list[dict[str, Any]]:
        return [{"transactionalId": t.transactional_id, "producerId": t.producer_id,
                 "epoch": t.epoch, "state": t.state.value} for t in self.txns.values()]  # fmt: skip

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
