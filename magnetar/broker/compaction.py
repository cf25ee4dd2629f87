"""Topic compaction, as Pulsar does it: the latest message of each key, up to a horizon.

A run reads the previous compacted view (messages below the old horizon) and then the topic
from the old horizon to the new one (the topic's end when the run starts), twice: the first
pass finds the latest offset of each key (a message with a null value, a *tombstone*, removes
its key; messages without a key are left out), the second writes the entries that hold a
retained message to a new ledger of its own beside the topic, ``<topic>/__compaction/<n>``.
Only then is the view recorded in the metadata store (``/compaction/<topic>``: ledger,
horizon, and the first offset of each of its entries) and the previous ledger deleted: a
run that fails or is cut by a crash leaves the previous view as it was.

The compacted ledger packs many original entries into each of its entries, each with the
original offsets and the indexes of its messages compaction dropped, so readers get the
original message ids back and the client skips the dropped messages of a batch (they are
delivered as acknowledged batch indexes).
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import json
import logging
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from magnetar.broker import formats
from magnetar.broker.errors import AlreadyExistsError
from magnetar.broker.transactions import TransactionIndex
from magnetar.core.entries import Entry
from magnetar.ledger import LedgerFactory, ManagedLedger
from magnetar.meta import MetadataStore

log = logging.getLogger(__name__)
CHUNK_BYTES = 1 << 20  # original entries packed into one entry of the compacted ledger
READ_ENTRIES = 1000
# [u32 payload size][i64 segment][i64 base][i32 count][u8 format][i64 publish][i64 event]
# [u32 dropped][u32 batch index]*dropped[payload]
_RECORD = struct.Struct(">IqqiBqqI")
_U32 = struct.Struct(">I")


class CompactionState(enum.Enum):
    """Pulsar's LongRunningProcessStatus of the last run on this broker."""

    NOT_RUN = "NOT_RUN"  # no run since the topic was loaded
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"  # the last run's view is the topic's compacted view
    ERROR = "ERROR"  # the last run failed; the previous view stays (lastError says why)


@dataclass(slots=True)
class CompactedRecord:
    """One original entry in the compacted view, with the messages compaction dropped."""

    entry: Entry
    dropped: list[int]  # batch indexes


def encode_record(entry: Entry, dropped: list[int]) -> bytes:
    header = _RECORD.pack(
        len(entry.payload),
        entry.segment_id,
        entry.base_offset,
        entry.count,
        entry.format,
        entry.publish_time,
        entry.event_time,
        len(dropped),
    )
    return header + b"".join(_U32.pack(i) for i in dropped) + entry.payload


def decode_records(chunk: bytes) -> list[CompactedRecord]:
    out, pos = [], 0
    while pos < len(chunk):
        size, segment, base, count, fmt, publish, event, n = _RECORD.unpack_from(chunk, pos)
        pos += _RECORD.size
        dropped = [_U32.unpack_from(chunk, pos + 4 * i)[0] for i in range(n)]
        pos += 4 * n
        payload = chunk[pos : pos + size]
        pos += size
        entry = Entry(base, count, publish, event, fmt, payload, segment)
        out.append(CompactedRecord(entry, dropped))
    return out


@dataclass(slots=True)
class CompactedView:
    """A finished compaction: its ledger holds the retained messages below ``horizon``."""

    ledger: ManagedLedger
    horizon: int  # offsets below it are compacted; a reader goes on in the topic from here
    firsts: list[int]  # the first original offset of each entry of the ledger
    generation: int

    async def read(self, position: int, max_records: int) -> list[CompactedRecord]:
        """Records holding offsets at or after ``position``, in offset order (empty: none
        left below the horizon)."""
        i = max(bisect.bisect_right(self.firsts, position) - 1, 0)
        out: list[CompactedRecord] = []
        while i < len(self.firsts) and len(out) < max_records:
            [chunk] = await self.ledger.read(self.ledger.start_offset + i, max_entries=1)
            out += [r for r in decode_records(chunk.payload) if r.entry.next_offset > position]
            i += 1
        return out

    async def records(self) -> AsyncIterator[CompactedRecord]:
        for i in range(len(self.firsts)):
            [chunk] = await self.ledger.read(self.ledger.start_offset + i, max_entries=1)
            for record in decode_records(chunk.payload):
                yield record


@dataclass(eq=False)
class TopicCompaction:
    """The compacted view of one topic partition and its compaction runs."""

    path: str  # the topic's path (tenant/namespace/local)
    ledger: ManagedLedger  # the topic's
    ledgers: LedgerFactory
    meta: MetadataStore
    view: CompactedView | None = None
    state: CompactionState = CompactionState.NOT_RUN
    last_error: str = ""
    threshold: int = 0  # bytes published since the last run that start one (0: never)
    bytes_since: int = 0  # published since the last run started (counted since loaded)
    txns: TransactionIndex | None = None  # the topic's Kafka transactions
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def node(self) -> str:
        return f"/compaction/{self.path}"

    async def load(self) -> None:
        """Reopen the recorded view, if the topic has one."""
        node = await self.meta.get(self.node)
        if node is None:
            return
        raw = json.loads(node.value)
        ledger = await self.ledgers.open(raw["ledger"])
        self.view = CompactedView(ledger, raw["horizon"], raw["firsts"], raw["generation"])

    def status(self) -> dict[str, str]:
        return {"status": self.state.value, "lastError": self.last_error}

    def trigger(self) -> None:
        """Start a run in the background; AlreadyExistsError while one is running."""
        if self._task is not None and not self._task.done():
            raise AlreadyExistsError(f"compaction of {self.path} is already in progress")
        self.state, self.last_error, self.bytes_since = CompactionState.RUNNING, "", 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    def published(self, size: int) -> None:
        """``size`` bytes were stored: start a run once the namespace's threshold is passed."""
        self.bytes_since += size
        if 0 < self.threshold <= self.bytes_since and (self._task is None or self._task.done()):
            self.trigger()

    async def wait(self) -> None:
        """Return once no run is in progress."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        try:
            await self.compact()
        except Exception as e:
            log.exception("compaction of %s failed", self.path)
            self.state, self.last_error = CompactionState.ERROR, str(e) or type(e).__name__
        else:
            self.state = CompactionState.SUCCESS

    async def compact(self) -> CompactedView:
        """One run (see the module's docstring); the new view is recorded when it returns.
        It stops at the last stable offset: a transaction still open is not compacted, and
        aborted messages and transaction markers are left out of the view."""
        horizon = self.ledger.end_offset
        if self.txns is not None:
            horizon = self.txns.last_stable(horizon)
        latest: dict[bytes, int] = {}
        async for entry, _ in self._sources(horizon):
            keys = formats.compaction_keys_of(entry.format, entry.payload) or []
            for i, (key, null) in enumerate(keys):
                if key is None:
                    continue
                if null:
                    latest.pop(key, None)
                else:
                    latest[key] = entry.base_offset + i
        retained = set(latest.values())
        del latest
        generation = self.view.generation + 1 if self.view is not None else 1
        out = await self._fresh_ledger(f"{self.path}/__compaction/{generation}")
        firsts = await self._write(out, retained, horizon)
        view = CompactedView(out, horizon, firsts, generation)
        body = {"ledger": out.name, "horizon": horizon, "firsts": firsts, "generation": generation}
        await self.meta.put(self.node, json.dumps(body).encode())
        old, self.view = self.view, view
        if old is not None:
            await old.ledger.delete()
        return view

    async def _write(self, out: ManagedLedger, retained: set[int], horizon: int) -> list[int]:
        firsts: list[int] = []
        chunk = bytearray()
        async for entry, before in self._sources(horizon):
            base, count = entry.base_offset, entry.count
            dropped = [i for i in range(count) if base + i not in retained]
            if len(dropped) == count:
                continue
            record = encode_record(entry, sorted(set(dropped) | set(before)))
            if chunk and len(chunk) + len(record) > CHUNK_BYTES:
                await out.append(bytes(chunk))
                chunk.clear()
            if not chunk:
                firsts.append(base)
            chunk += record
        if chunk:
            await out.append(bytes(chunk))
        return firsts

    async def _fresh_ledger(self, name: str) -> ManagedLedger:
        ledger = await self.ledgers.open(name)
        if ledger.end_offset > ledger.start_offset:  # left by a run a crash cut short
            await ledger.delete()
            ledger = await self.ledgers.open(name)
        return ledger

    async def _sources(self, horizon: int) -> AsyncIterator[tuple[Entry, list[int]]]:
        """Every entry below ``horizon``: the previous view's, then the topic's after it."""
        start = self.ledger.start_offset
        if self.view is not None:
            async for record in self.view.records():
                yield record.entry, record.dropped
            start = max(start, self.view.horizon)
        offset = start
        while offset < horizon:
            entries = await self.ledger.read(offset, max_entries=READ_ENTRIES)
            if not entries:
                break
            for entry in entries:
                if entry.base_offset >= horizon:
                    return
                if entry.next_offset > offset and not self._hidden(entry):
                    yield entry, []
            offset = entries[-1].next_offset

    def _hidden(self, entry: Entry) -> bool:
        return self.txns is not None and self.txns.hides(entry)

    async def delete(self) -> None:
        """Drop the compacted view and its record (the topic is being deleted)."""
        if self._task is not None:
            self._task.cancel()
        if self.view is not None:
            await self.view.ledger.delete()
            self.view = None
        await self.meta.delete_recursive(self.node)
