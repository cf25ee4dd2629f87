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

Lifecycle: EMPTY → ONGOING (a partition or group added) → PREPARE_COMMIT / PREPARE_ABORT
(EndTxn, or the timeout: markers being written) → COMPLETE_COMMIT / COMPLETE_ABORT → ONGOING
again with the next transaction.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from magnetar.meta import MetadataStore
from magnetar.protocols.kafka.errors import ErrorCode, RefusedError

log = logging.getLogger(__name__)
ROOT = "/kafka/transactions"
MAX_TIMEOUT_MS = 15 * 60_000  # Kafka's transaction.max.timeout.ms
TopicPartition = tuple[str, int]
# (topic, partition, offset, metadata, leader epoch)
Offsets = list[tuple[str, int, int, str | None, int]]
# writes one marker to a partition: (topic, partition, producer id, epoch, commit)
MarkerWriter = Callable[[str, int, int, int, bool], Awaitable[None]]
# commits a group's offsets: (group, offsets)
OffsetWriter = Callable[[str, Offsets], Awaitable[None]]


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
    offsets: dict[str, Offsets] = field(default_factory=dict)  # staged, by group
    started_ms: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Txn:
        raw = json.loads(data)
        raw["state"] = TxnState(raw["state"])
        raw["partitions"] = [tuple(p) for p in raw["partitions"]]
        raw["offsets"] = {g: [tuple(o) for o in offs] for g, offs in raw["offsets"].items()}
        return cls(**raw)


class TransactionCoordinator:
    """Every transactional id this node coordinates (this node coordinates them all)."""

    def __init__(
        self,
        meta: MetadataStore,
        new_producer_id: Callable[[], Awaitable[int]],
        write_marker: MarkerWriter,
        commit_offsets: OffsetWriter,
    ) -> None:
        self.meta = meta
        self._new_producer_id = new_producer_id
        self._write_marker = write_marker
        self._commit_offsets = commit_offsets
        self.txns: dict[str, Txn] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Load every stored transaction; finish those caught mid-way; arm the timeouts."""
        for tid in await self.meta.list_children(ROOT):
            node = await self.meta.get(f"{ROOT}/{tid}")
            if node is None:
                continue
            txn = self.txns[tid] = Txn.from_bytes(node.value)
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn(self._finish_locked(txn))
            elif txn.state is TxnState.ONGOING:
                self._arm(txn)

    def _lock(self, tid: str) -> asyncio.Lock:
        return self._locks.setdefault(tid, asyncio.Lock())

    async def _save(self, txn: Txn) -> None:
        await self.meta.put(f"{ROOT}/{txn.transactional_id}", txn.to_bytes())

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
            txn = self.txns.get(tid)
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
            txn = self._current(tid, producer_id, epoch)
            new = [p for p in partitions if p not in txn.partitions]
            if not new and txn.state is TxnState.ONGOING:
                return
            self._begin(txn)
            txn.partitions += new
            await self._save(txn)

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> None:
        async with self._lock(tid):
            txn = self._current(tid, producer_id, epoch)
            self._begin(txn)
            if group not in txn.groups:
                txn.groups.append(group)
            await self._save(txn)

    async def stage_offsets(
        self, tid: str, producer_id: int, epoch: int, group: str, offsets: Offsets
    ) -> None:
        """TxnOffsetCommit: offsets committed if and when the transaction commits."""
        async with self._lock(tid):
            txn = self._current(tid, producer_id, epoch)
            if txn.state is not TxnState.ONGOING or group not in txn.groups:
                raise TxnError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"group {group!r} was not added to the transaction (AddOffsetsToTxn)",
                )
            staged = {(o[0], o[1]): o for o in txn.offsets.get(group, [])}
            staged.update({(o[0], o[1]): o for o in offsets})
            txn.offsets[group] = list(staged.values())
            await self._save(txn)

    def _current(self, tid: str, producer_id: int, epoch: int) -> Txn:
        """The transaction ``tid`` if (producer id, epoch) are its current ones."""
        txn = self.txns.get(tid)
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
            txn.partitions, txn.groups, txn.offsets = [], [], {}
            self._arm(txn)

    # -- ending ------------------------------------------------------------------------

    async def end(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: durable (markers written, offsets committed) when this returns."""
        async with self._lock(tid):
            txn = self.txns.get(tid)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if txn is not None and txn.producer_id == producer_id and txn.epoch == epoch:
                if txn.state is done:
                    return  # a retry of the EndTxn that ended it
                if txn.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT):  # fmt: skip
                    if not commit and txn.state is TxnState.EMPTY:
                        return  # aborting nothing
                    raise TxnError(
                        ErrorCode.INVALID_TXN_STATE, f"no transaction is open ({txn.state})"
                    )
            txn = self._current(tid, producer_id, epoch)
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
        if commit:
            for group, offsets in txn.offsets.items():
                await self._commit_offsets(group, offsets)
        txn.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        txn.partitions, txn.groups, txn.offsets = [], [], {}
        await self._save(txn)

    async def _finish_locked(self, txn: Txn) -> None:
        async with self._lock(txn.transactional_id):
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
            txn = self.txns.get(tid)
            if txn is None or txn.state is not TxnState.ONGOING:
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

    def accepts(self, producer_id: int, epoch: int, topic: str, index: int) -> bool:
        """Whether a transactional batch of (producer id, epoch) may be written to the
        partition: its transaction is open and added the partition (KIP-890's check, so a
        fenced or confused producer cannot open a transaction no marker will ever close)."""
        return any(
            t.producer_id == producer_id
            and t.epoch == epoch
            and t.state is TxnState.ONGOING
            and (topic, index) in t.partitions
            for t in self.txns.values()
        )

    def describe(self) -> list[dict[str, Any]]:
        return [{"transactionalId": t.transactional_id, "producerId": t.producer_id,
                 "epoch": t.epoch, "state": t.state.value} for t in self.txns.values()]  # fmt: skip

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
