"""Segments in this process's own storage engine: the local :class:`SegmentStorage`.

Each segment is a ledger of a :class:`~magnetar.storage.ledger_store.LedgerStore`, stored as
a storage node stores one (an engine partition ``L<segment id>`` of records carrying their
entry ids, fences in a file), but written and read in-process: the engine is a bookie's
store with one writer, the partition's :class:`~magnetar.ledger.writer.SegmentWriter`.
Appends of every segment share the engine's journal, so one fsync (group commit) makes a
burst durable across segments and partitions.

Where a segment ends: a segment's entries are stored in entry-id order, so its last
confirmed entry is the end of the prefix 0..n the store holds. An append that failed
leaves no trace, but an append the writer issued after it may still be stored; such an
entry lies past the prefix (or past the end the writer seals) and is never read.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from magnetar.core.entries import Entry
from magnetar.core.futures import resolve
from magnetar.ledger.segment_storage import Placement, SegmentSpec, Settle
from magnetar.storage import SegmentState
from magnetar.storage.errors import FencedError, StorageError
from magnetar.storage.ledger_store import LedgerStore, StoredLedger

LOCAL: Placement = {"local": True}
MAX_READ_BYTES = 64 << 20


@dataclass(slots=True)
class _Segment:
    sealed: int | None = None  # the last entry once sealed (CLOSED); None while open
    # what the store holds of it, once opened here: an add of it that failed
    # (``StoredLedger.failed``) fails every later append of the segment
    ledger: StoredLedger | None = None


class LocalSegments:
    """:class:`~magnetar.ledger.segment_storage.SegmentStorage` over a local
    :class:`LedgerStore`. The store (and its engine) stay their opener's to close."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self._segments: dict[int, _Segment] = {}

    async def open_segment(self, spec: SegmentSpec) -> None:
        """Create the segment's partition (durable), so appends reach the engine in order."""
        await self.store.create(spec.segment_id)
        self._segments[spec.segment_id] = _Segment(ledger=self.store.ledger(spec.segment_id))

    def attach(self, spec: SegmentSpec, placement: Placement) -> None:
        if placement and placement != LOCAL:
            raise StorageError(
                f"segment {spec.segment_id} of {spec.partition} is not stored locally "
                f"(its placement is {placement}): a partition written by replicated storage "
                "is served by brokers of its cluster (magnetar broker)"
            )
        info = spec.record.info
        sealed = None if info.state is SegmentState.OPEN else info.entries - 1
        self._segments[spec.segment_id] = _Segment(sealed)

    def detach(self, segment: int) -> None:
        self._segments.pop(segment, None)

    def placement(self, segment: int) -> Placement:
        return dict(LOCAL)

    def can_roll(self, segment: int) -> bool:
        return True  # the local disk is the only place a successor can go

    async def append(self, segment: int, entry_id: int, entry: Entry) -> None:
        """Durable (fsync policy of the engine) when it returns; FencedError once another
        writer fenced the segment. Cancelling the call stops only the wait."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.start_append(segment, entry_id, entry, functools.partial(resolve, done))
        await done

    def start_append(self, segment: int, entry_id: int, entry: Entry, then: Settle) -> None:
        """:meth:`append` started now, its outcome told to ``then`` (at once for a
        refusal, else from the engine's flusher): no task or future per entry."""
        seg = self._segments.get(segment)
        ledger = seg.ledger if seg is not None else None
        if (
            ledger is None
            or ledger.failed is not None
            or seg is None
            or seg.sealed is not None
            or self.store.is_fenced(segment)
        ):
            then(self._refusal(segment, seg))
            return
        self.store.start_entry(segment, entry_id, entry, then)

    def _refusal(self, segment: int, seg: _Segment | None) -> BaseException:
        ledger = seg.ledger if seg is not None else None
        if seg is None or ledger is None:
            return FencedError(f"segment {segment} is not open for writing here")
        if self.store.is_fenced(segment):
            return FencedError(f"segment {segment} is fenced: another writer recovered it")
        if ledger.failed is not None:
            return ledger.failed
        return StorageError(f"segment {segment} is sealed at entry {seg.sealed}")

    async def seal(self, segment: int, last_entry: int) -> None:
        """The writer records the end in the segment list (CLOSED, entries), which
        :meth:`attach` reads back; the store closes the ledger's file."""
        self._segments.setdefault(segment, _Segment()).sealed = last_entry
        await self.store.seal(segment)

    async def fence(self, segment: int) -> int:
        """The fence is on disk and appends accepted before it finished when this returns."""
        await self.store.fence(segment)
        return self._last_stored(segment)

    def sealed(self, segment: int) -> int | None:
        """The last entry of a sealed segment known here (None: open or unknown)."""
        seg = self._segments.get(segment)
        return seg.sealed if seg is not None else None

    async def last_confirmed(self, segment: int) -> int:
        stored = self._last_stored(segment)
        sealed = self.sealed(segment)
        return stored if sealed is None else min(stored, sealed)

    def _last_stored(self, segment: int) -> int:
        ledger = self.store.ledger(segment)
        return ledger.last_of_prefix if ledger is not None else -1

    async def read(self, segment: int, first: int, last: int) -> list[Entry]:
        """Entries ``first``.. up to ``last`` and the last confirmed entry; [] when
        ``first`` lies beyond that. Raises StorageError for an entry whose stored bytes
        are damaged."""
        last = min(last, await self.last_confirmed(segment))
        if first > last:
            return []
        got = await self.store.read(segment, first, last, MAX_READ_BYTES)
        if got is None:
            raise StorageError(f"entry {first} of segment {segment} is not stored here")
        if not got.records and got.damaged_at is not None:
            ledger = self.store.ledger(segment)
            problem = ledger.damaged if ledger is not None else "unknown"
            raise StorageError(
                f"entry {got.damaged_at} of segment {segment} cannot be read: {problem}"
            )
        return [r.entry(segment) for r in got.records]

    async def delete(self, segment: int) -> None:
        await self.store.delete(segment)
        self._segments.pop(segment, None)
