"""What the managed ledger's writer asks of storage: segment-addressed and asynchronous.

The writer (:class:`magnetar.ledger.writer.SegmentWriter`) is the only writer of a
partition: it assigns offsets and entry ids, decides rollover and keeps the segment list in
the metadata store with compare-and-set. Storage only stores, serves and fences the entries
of segments it is told about (BookKeeper's client API is the model; docs/cluster-protocol.md
"The seam"). Replicated storage implements it over storage nodes
(``magnetar.cluster.segments``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.core.entries import Entry
from magnetar.storage import SegmentInfo

Placement = dict[str, Any]  # storage's own record of where a segment lives (JSON)
Settle = Callable[[BaseException | None], None]  # told an append's outcome (None: durable)


@dataclass(slots=True)
class SegmentRecord:
    """One segment of the partition's segment list. ``info`` is the ledger's and replaced
    (never changed in place) by the writer once a change is durable; storage may read it."""

    info: SegmentInfo


@dataclass(frozen=True, slots=True)
class SegmentSpec:
    """A segment as storage sees it.

    ``persist`` records a changed placement of the segment (an ensemble change, say) in the
    segment list by compare-and-set; durable when it returns. It raises FencedError when
    another writer changed the list: storage then must not use the new placement.
    """

    partition: str
    record: SegmentRecord
    persist: Callable[[Placement], Awaitable[None]]

    @property
    def segment_id(self) -> int:
        return self.record.info.segment_id


class SegmentStorage(Protocol):
    """Where a segment's entries live. Entry ids of a segment are 0, 1, 2, ... in append
    order; the writer calls :meth:`append` in that order (an implementation registers an
    entry before its first ``await``, so the call order is the order), or, when the
    storage offers it, ``start_append`` (:class:`StartsAppends`) with the same contract."""

    async def open_segment(self, spec: SegmentSpec) -> None:
        """Make a new, empty segment writable (replicated: choose its ensemble and quorums).
        Its placement is recorded by the writer in the segment list before any append."""
        ...

    def attach(self, spec: SegmentSpec, placement: Placement) -> None:
        """Know an existing segment (at load) by its recorded placement."""
        ...

    def detach(self, segment: int) -> None:
        """Forget a segment (its partition was unloaded or released); nothing is written."""
        ...

    def placement(self, segment: int) -> Placement:
        """The segment's current placement, as the segment list must record it."""
        ...

    def can_roll(self, segment: int) -> bool:
        """Whether a successor of the open ``segment`` could be opened now (replicated: are
        enough storage nodes writable). A size limit is a policy, not a promise: while this
        is False the open segment keeps taking appends."""
        ...

    async def append(self, segment: int, entry_id: int, entry: Entry) -> None:
        """Store ``entry`` as ``entry_id`` of ``segment``. Durable when it returns, and every
        earlier entry of the segment too. If it raises, nothing of the entry was
        acknowledged, and every later append to the segment fails as well; FencedError once
        another writer fenced the segment."""
        ...

    async def seal(self, segment: int, last_entry: int) -> None:
        """The segment ends at ``last_entry`` (after the appends in flight end): no more
        appends. The writer records it CLOSED in the segment list after this returns."""
        ...

    async def fence(self, segment: int) -> int:
        """Fence the segment of a previous writer (its later appends fail), make every entry
        it may have acknowledged durable, and return the last entry id (-1: none)."""
        ...

    async def read(self, segment: int, first: int, last: int) -> list[Entry]:
        """Entries ``first``..``last`` (at least the first one, then as many as fit a read);
        never past the last confirmed entry."""
        ...

    async def last_confirmed(self, segment: int) -> int:
        """The last entry id known durable (-1: none)."""
        ...

    async def delete(self, segment: int) -> None:
        """Delete the segment's entries; a copy that cannot be reached now is logged."""
        ...


@dataclass(frozen=True, slots=True)
class RolloverPolicy:
    """When the writer closes the open segment for a new one (each 0: no limit). It counts
    what was handed to storage, acknowledged or not, so a burst of appends in flight cannot
    grow a segment past its limit by more than one entry."""

    max_bytes: int
    max_entries: int = 0
    max_age_s: float = 0.0

    def due(self, size: int, entries: int, created_ms: int, now_ms: int) -> bool:
        if size >= self.max_bytes:
            return True
        if self.max_entries and entries >= self.max_entries:
            return True
        age_ms = now_ms - created_ms
        return bool(self.max_age_s and entries and age_ms >= self.max_age_s * 1000)


class StartsAppends(Protocol):
    """What a :class:`SegmentStorage` may offer besides ``append``: the same append,
    started by a plain call that reports its outcome to a callback, so the writer spends
    no task and no future of its own per entry (the local storage does)."""

    def start_append(self, segment: int, entry_id: int, entry: Entry, then: Settle) -> None:
        """Start :meth:`SegmentStorage.append` now (the call order is the order).
        ``then`` is told its outcome exactly once, as ``append`` would return (None) or
        raise, possibly before this returns; it must not block."""
        ...


def append_starter(storage: SegmentStorage) -> Callable[[int, int, Entry, Settle], None]:
    """How to start an append of ``storage``: its own ``start_append`` if it has one, else
    its ``append`` run as a task (started in call order) whose end is reported to ``then``."""
    own: Callable[[int, int, Entry, Settle], None] | None = getattr(storage, "start_append", None)
    if own is not None:
        return own

    def start(segment: int, entry_id: int, entry: Entry, then: Settle) -> None:
        task = asyncio.ensure_future(storage.append(segment, entry_id, entry))
        task.add_done_callback(lambda done: then(_outcome(done)))

    return start


def _outcome(done: asyncio.Future[None]) -> BaseException | None:
    if done.cancelled():
        return asyncio.CancelledError()
    return done.exception()
