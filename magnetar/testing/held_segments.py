"""The faults of :class:`~magnetar.testing.memory_segments.MemorySegments` around any
:class:`~magnetar.ledger.segment_storage.SegmentStorage`, so the writer's contract tests run
unchanged over a real one (``magnetar.ledger.local_segments`` on a real engine).

While ``hold`` is set, an append waits before it reaches the storage beneath, until
:meth:`HeldSegments.release_appends` lets the held ones through in the order they came;
:meth:`HeldSegments.fail_next` fails the next append of a segment and every later one,
:meth:`HeldSegments.fail_held` the held ones.
Both ways of appending are held and failed alike: ``append`` and, for the writer,
``start_append`` (the inner storage's own if it has one, so its fast path is the one tested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.core.entries import Entry
from magnetar.ledger.segment_storage import (
    Placement,
    SegmentSpec,
    SegmentStorage,
    Settle,
    append_starter,
)
from magnetar.storage.errors import StorageError


class HeldSegments:
    """``inner`` with appends that can be held back or failed."""

    def __init__(self, inner: SegmentStorage) -> None:
        self.inner = inner
        self.hold = False
        # each held append: what lets it go on, what fails it
        self._held: list[tuple[Callable[[], None], Callable[[StorageError], None]]] = []
        self._start = append_starter(inner)
        self._failed: dict[int, StorageError] = {}

    def fail_next(self, segment: int, error: StorageError) -> None:
        """The next append to ``segment`` (and every later one) fails with ``error``."""
        self._failed[segment] = error

    @property
    def held(self) -> int:
        """Appends waiting for :meth:`release_appends`."""
        return len(self._held)

    def release_appends(self) -> int:
        """Let every held append go on to the storage beneath, in order; returns how many.
        Each is durable once its own call returns, as the storage beneath says."""
        held, self._held = self._held, []
        for go_on, _fail in held:
            go_on()
        return len(held)

    def fail_held(self, error: StorageError) -> int:
        """Fail every held append with ``error`` (nothing of it reaches the storage
        beneath); returns how many."""
        held, self._held = self._held, []
        for _go_on, fail in held:
            fail(error)
        return len(held)

    async def append(self, segment: int, entry_id: int, entry: Entry) -> None:
        failed = self._failed.get(segment)
        if failed is not None:
            raise failed
        if self.hold:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._held.append((lambda: done.set_result(None), done.set_exception))
            await done  # resumed in release order, then hands the entry on at once
        await self.inner.append(segment, entry_id, entry)

    def start_append(self, segment: int, entry_id: int, entry: Entry, then: Settle) -> None:
        failed = self._failed.get(segment)
        if failed is not None:
            then(failed)
        elif self.hold:
            self._held.append((lambda: self._start(segment, entry_id, entry, then), then))
        else:
            self._start(segment, entry_id, entry, then)

    async def open_segment(self, spec: SegmentSpec) -> None:
        await self.inner.open_segment(spec)

    def attach(self, spec: SegmentSpec, placement: Placement) -> None:
        self.inner.attach(spec, placement)

    def detach(self, segment: int) -> None:
        self.inner.detach(segment)

    def placement(self, segment: int) -> Placement:
        return self.inner.placement(segment)

    def can_roll(self, segment: int) -> bool:
        return self.inner.can_roll(segment)

    async def seal(self, segment: int, last_entry: int) -> None:
        await self.inner.seal(segment, last_entry)

    async def fence(self, segment: int) -> int:
        return await self.inner.fence(segment)

    async def read(self, segment: int, first: int, last: int) -> list[Entry]:
        return await self.inner.read(segment, first, last)

    async def last_confirmed(self, segment: int) -> int:
        return await self.inner.last_confirmed(segment)

    async def delete(self, segment: int) -> None:
        await self.inner.delete(segment)
