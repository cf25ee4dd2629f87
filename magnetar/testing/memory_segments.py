"""An in-memory :class:`~magnetar.ledger.segment_storage.SegmentStorage` with faults to
inject: the managed ledger's writer is tested against it in-process, without storage nodes
(the mock bookies of Pulsar's tests in spirit).

Appends are held until :meth:`MemorySegments.release_appends` when ``hold`` is set, so a test
decides when they become durable; :meth:`fail_next` fails the next append of a segment (and
every later one, as the contract says), :meth:`fail_held` the held ones; :meth:`fence`
refuses later appends with FencedError.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import Placement, SegmentSpec
from magnetar.storage.errors import FencedError, StorageError


@dataclass(slots=True)
class _Segment:
    spec: SegmentSpec
    entries: dict[int, Entry] = field(default_factory=dict)
    sealed: int | None = None
    fenced: bool = False
    failed: StorageError | None = None


class MemorySegments:
    """Segments kept in dicts; shared by several writers to play a crash and a takeover."""

    def __init__(self) -> None:
        self.segments: dict[int, _Segment] = {}
        self.attached: set[int] = set()
        self.deleted: list[int] = []
        self.hold = False
        self._held: list[tuple[asyncio.Future[None], _Segment, int, Entry]] = []
        self.rollable = True

    async def open_segment(self, spec: SegmentSpec) -> None:
        self.segments[spec.segment_id] = _Segment(spec)
        self.attached.add(spec.segment_id)

    def attach(self, spec: SegmentSpec, placement: Placement) -> None:
        self.segments.setdefault(spec.segment_id, _Segment(spec))
        self.attached.add(spec.segment_id)

    def detach(self, segment: int) -> None:
        self.attached.discard(segment)

    def placement(self, segment: int) -> Placement:
        return {"memory": True}

    def can_roll(self, segment: int) -> bool:
        return self.rollable

    def fail_next(self, segment: int, error: StorageError) -> None:
        """The next append to ``segment`` (and every later one) fails with ``error``."""
        self.segments[segment].failed = error

    async def append(self, segment: int, entry_id: int, entry: Entry) -> None:
        seg = self.segments[segment]
        if seg.fenced:
            raise FencedError(f"segment {segment} is fenced")
        if seg.failed is not None:
            raise seg.failed
        if seg.sealed is not None:
            raise StorageError(f"segment {segment} is sealed")
        if self.hold:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._held.append((done, seg, entry_id, entry))
            await done
            return
        seg.entries[entry_id] = entry

    @property
    def held(self) -> int:
        """Appends waiting for :meth:`release_appends`."""
        return len(self._held)

    def release_appends(self) -> int:
        """Make every held append durable, in order; returns how many."""
        held, self._held = self._held, []
        for done, seg, eid, entry in held:
            seg.entries[eid] = entry
            done.set_result(None)
        return len(held)

    def fail_held(self, error: StorageError) -> int:
        """Fail every held append with ``error`` (and every later append of their
        segments); returns how many."""
        held, self._held = self._held, []
        for done, seg, _eid, _entry in held:
            seg.failed = error
            done.set_exception(error)
        return len(held)

    async def seal(self, segment: int, last_entry: int) -> None:
        self.segments[segment].sealed = last_entry

    async def fence(self, segment: int) -> int:
        seg = self.segments[segment]
        seg.fenced = True
        return max(seg.entries, default=-1)

    async def read(self, segment: int, first: int, last: int) -> list[Entry]:
        seg = self.segments[segment]
        return [seg.entries[i] for i in range(first, last + 1) if i in seg.entries]

    async def last_confirmed(self, segment: int) -> int:
        return max(self.segments[segment].entries, default=-1)

    async def delete(self, segment: int) -> None:
        self.segments[segment].entries.clear()
        self.deleted.append(segment)
