"""A managed ledger that keeps its entries in memory, for in-process tests of what sits on a
ledger (subscriptions and their dispatchers, readers) without a storage engine or files.

:class:`MemoryStorage` implements :class:`magnetar.ledger.LedgerStorage`, so the ledger is a
real :class:`~magnetar.ledger.ManagedLedger` and message ids, trims and damaged-data errors
behave as they do on disk: segments roll every ``entries_per_segment`` entries, :meth:`trim`
drops whole closed segments, and :meth:`MemoryStorage.damage` makes an entry fail its reads
with ``CorruptionError`` as a bad checksum would. No object store: offload is refused.

    ledger = await memory_ledger()
    await append_pulsar(ledger, b"v", key="k", deliver_at=clock.now_ms() + 5_000)
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.core.clock import SYSTEM_CLOCK, Clock
from magnetar.core.entries import Entry
from magnetar.core.formats import PULSAR
from magnetar.ledger import (
    CorruptionError,
    ManagedLedger,
    OffsetOutOfRangeError,
    SegmentChangedError,
    SegmentState,
)
from magnetar.ledger import SegmentView as SegmentInfo
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb


class MemoryStorageError(NotImplementedError):
    """A call the in-memory storage does not serve (offload, local copies): use the
    storage engine in tests that need them."""


@dataclass(slots=True)
class _Partition:
    segments: list[SegmentInfo] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)  # retained, in offset order
    bases: list[int] = field(default_factory=list)  # their base offsets, for bisect
    damaged: dict[int, str] = field(default_factory=dict)  # base offset → problem
    start: int = 0
    end: int = 0


class MemoryStorage:
    """Entries in lists, one per partition; every call answers at once."""

    def __init__(self, *, entries_per_segment: int = 100, clock: Clock = SYSTEM_CLOCK) -> None:
        if entries_per_segment < 1:
            raise ValueError(f"entries_per_segment must be >= 1, not {entries_per_segment}")
        self.entries_per_segment = entries_per_segment
        self.clock = clock
        self._parts: dict[str, _Partition] = {}
        self._next_segment = 1

    def _part(self, name: str) -> _Partition:
        part = self._parts.get(name)
        if part is None:
            raise KeyError(f"no partition {name!r} in this MemoryStorage: create it first")
        return part

    # -- partitions -----------------------------------------------------------------------

    async def create_partition(self, name: str) -> None:
        if name not in self._parts:
            self._parts[name] = _Partition()
            self._roll(self._parts[name])

    async def delete_partition(self, name: str) -> None:
        del self._parts[name]

    def has_partition(self, name: str) -> bool:
        return name in self._parts

    def _roll(self, part: _Partition) -> None:
        if part.segments:
            part.segments[-1].state = SegmentState.CLOSED
        first, now = part.end, self.clock.now_ms()
        part.segments.append(
            SegmentInfo(self._next_segment, 0, SegmentState.OPEN, first, first, created_ms=now)
        )
        self._next_segment += 1

    # -- data -----------------------------------------------------------------------------

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
        part = self._part(name)
        if part.segments[-1].entries >= self.entries_per_segment:
            self._roll(part)
        seg = part.segments[-1]
        when = self.clock.now_ms() if publish_time is None else publish_time
        entry = Entry(part.end, count, when, event_time, fmt, payload, seg.segment_id)
        part.entries.append(entry)
        part.bases.append(entry.base_offset)
        part.end += count
        seg.end_offset, seg.entries, seg.size = part.end, seg.entries + 1, seg.size + len(payload)
        return entry

    async def read(
        self, name: str, offset: int, *, max_entries: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        """Entries from the one holding ``offset`` on; [] at the end. A damaged entry raises
        CorruptionError when it comes first, else ends the read before it."""
        part = self._part(name)
        if offset < part.start:
            raise OffsetOutOfRangeError(f"offset {offset} of {name} is before {part.start}")
        if offset >= part.end:
            return []
        i = max(bisect.bisect_right(part.bases, offset) - 1, 0)
        out: list[Entry] = []
        size = 0
        for entry in part.entries[i : i + max_entries]:
            if entry.base_offset in part.damaged:
                if out:
                    break
                problem = part.damaged[entry.base_offset]
                raise CorruptionError(f"memory:{name}", entry.base_offset, problem)
            if out and size + len(entry.payload) > max_bytes:
                break
            out.append(entry)
            size += len(entry.payload)
        return out

    def damage(self, name: str, offset: int, problem: str = "checksum mismatch") -> None:
        """Make the entry at base offset ``offset`` fail its reads (fault injection)."""
        part = self._part(name)
        if offset not in part.bases:
            raise KeyError(f"no entry of {name} starts at offset {offset}")
        part.damaged[offset] = problem

    def damaged(self, name: str) -> dict[int, str]:
        part = self._part(name)
        return {
            e.segment_id: part.damaged[e.base_offset]
            for e in part.entries
            if e.base_offset in part.damaged
        }

    async def next_readable(self, name: str, offset: int) -> int:
        part = self._part(name)
        seg = next(s for s in part.segments if s.first_offset <= offset < s.end_offset)
        for entry in part.entries:
            base = entry.base_offset
            if offset < base < seg.end_offset and base not in part.damaged:
                return base
        return seg.end_offset

    async def check(self, name: str, *, repair: bool = False) -> list[dict[str, Any]]:
        part = self._part(name)
        damaged = self.damaged(name)
        return [
            {
                "segmentId": s.segment_id,
                "state": s.state.value,
                "entries": s.entries,
                "error": damaged.get(s.segment_id, ""),
            }
            for s in part.segments
        ]

    # -- positions and segments -----------------------------------------------------------

    def end_offset(self, name: str) -> int:
        return self._part(name).end

    def start_offset(self, name: str) -> int:
        return self._part(name).start

    def segments(self, name: str) -> list[SegmentInfo]:
        return [dataclasses.replace(s) for s in self._part(name).segments]

    async def recorded(self, name: str, segment_id: int) -> SegmentInfo | None:
        if not self.has_partition(name):
            return None
        return next((s for s in self.segments(name) if s.segment_id == segment_id), None)

    async def trim(self, name: str, before: int) -> list[SegmentInfo]:
        """Drop the closed segments wholly before ``before`` (never the open one)."""
        part = self._part(name)
        gone = []
        while len(part.segments) > 1 and part.segments[0].end_offset <= before:
            gone.append(part.segments.pop(0))
        if gone:
            part.start = part.segments[0].first_offset
            keep = bisect.bisect_left(part.bases, part.start)
            part.entries, part.bases = part.entries[keep:], part.bases[keep:]
        return gone

    async def find_offset(self, name: str, ts: int) -> int:
        part = self._part(name)
        return next((e.base_offset for e in part.entries if e.publish_time >= ts), part.end)

    async def find_in_segment(self, name: str, segment_id: int, ts: int) -> int | None:
        part = self._part(name)
        return next(
            (
                e.base_offset
                for e in part.entries
                if e.segment_id == segment_id and e.publish_time >= ts
            ),
            None,
        )

    async def update_segment(
        self,
        name: str,
        segment_id: int,
        *,
        expect: Callable[[SegmentInfo], bool] | None = None,
        **changes: Any,
    ) -> SegmentInfo:
        part = self._part(name)
        i = next(i for i, s in enumerate(part.segments) if s.segment_id == segment_id)
        if expect is not None and not expect(part.segments[i]):
            raise SegmentChangedError(f"segment {segment_id} of {name} changed meanwhile")
        part.segments[i] = dataclasses.replace(part.segments[i], **changes)
        return dataclasses.replace(part.segments[i])

    async def drop_local_copy(self, name: str, segment_id: int) -> None:
        raise MemoryStorageError("MemoryStorage has no object store: nothing is offloaded")

    async def unload(self, name: str) -> None:
        """Nothing to hand over: the entries stay in this object."""

    def release(self, name: str) -> None:
        """Nothing to hand over: the entries stay in this object."""

    async def replica_reads(self, name: str, segment_id: int) -> list[dict[str, Any]] | None:
        return None


async def memory_ledger(
    name: str = "persistent://public/default/memory",
    *,
    entries_per_segment: int = 100,
    clock: Clock = SYSTEM_CLOCK,
) -> ManagedLedger:
    """A managed ledger on a fresh :class:`MemoryStorage` (``ledger.storage`` is it)."""
    storage = MemoryStorage(entries_per_segment=entries_per_segment, clock=clock)
    return await ManagedLedger.open(name, storage)


def pulsar_payload(
    value: bytes, *, key: str | None = None, deliver_at: int | None = None, sequence_id: int = 0
) -> bytes:
    """A stored Pulsar entry of one message (``[u32 size][MessageMetadata][value]``)."""
    meta = pb.MessageMetadata(producer_name="memory", sequence_id=sequence_id, publish_time=1)
    if key is not None:
        meta.partition_key = key
    if deliver_at is not None:
        meta.deliver_at_time = deliver_at
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + value


async def append_pulsar(
    ledger: ManagedLedger, value: bytes, *, key: str | None = None, deliver_at: int | None = None
) -> Entry:
    """Append one Pulsar message, as a producer's SEND is stored."""
    payload = pulsar_payload(value, key=key, deliver_at=deliver_at, sequence_id=ledger.end_offset)
    return await ledger.append(payload, fmt=PULSAR)
