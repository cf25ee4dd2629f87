"""Durable cursors: how far a subscription has acknowledged.

Every offset below ``mark_delete`` is acknowledged; offsets at or above it may be
acknowledged individually (kept as disjoint ranges). A batch message has its own offset, so
batch-index acks are individual acks of offsets. A cursor is persisted through the
metadata store by :class:`CursorStore`, which coalesces bursts of acks into one write.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import Iterable

from magnetar.broker.errors import CursorFencedError
from magnetar.meta import BadVersionError, MetadataStore, NodeExistsError, NotFoundError

log = logging.getLogger(__name__)
MAX_PERSISTED_RANGES = 10_000


class Cursor:
    """Acknowledgement state of one subscription."""

    def __init__(self, mark_delete: int = 0, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.mark_delete = mark_delete
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in ranges:
            self._add_range(start, end)
        self._advance()
        self.version = 0  # bumped on every change; the persister writes when it moves

    def is_acked(self, offset: int) -> bool:
        if offset < self.mark_delete:
            return True
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and offset < self._ends[i]

    def acked_count(self, start: int, end: int) -> int:
        """How many offsets in [start, end) are acknowledged."""
        n = max(0, min(end, self.mark_delete) - start)
        lo = max(start, self.mark_delete)
        for s, e in zip(self._starts, self._ends, strict=True):
            n += max(0, min(e, end) - max(s, lo))
        return n

    def ack(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            if offset >= self.mark_delete:
                self._add_range(offset, offset + 1)
        self._advance()
        self.version += 1

    def ack_range(self, start: int, end: int) -> None:
        if end > max(start, self.mark_delete):
            self._add_range(max(start, self.mark_delete), end)
            self._advance()
            self.version += 1

    def ack_cumulative(self, upto: int) -> None:
        """Acknowledge every offset <= ``upto``."""
        if upto + 1 > self.mark_delete:
            self.mark_delete = upto + 1
            self._drop_below()
            self._advance()
            self.version += 1

    def reset(self, offset: int) -> None:
        """Seek: everything before ``offset`` acknowledged, nothing after."""
        self.mark_delete = max(offset, 0)
        self._starts.clear()
        self._ends.clear()
        self.version += 1

    def first_unacked(self, start: int) -> int:
        """The first offset >= ``start`` that is not acknowledged."""
        offset = max(start, self.mark_delete)
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self._ends[i]:
            return self._ends[i]
        return offset

    def _add_range(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self._ends, start)
        j = bisect.bisect_right(self._starts, end)
        if i < j:
            start = min(start, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def _drop_below(self) -> None:
        while self._starts and self._ends[0] <= self.mark_delete:
            del self._starts[0], self._ends[0]

    def _advance(self) -> None:
        self._drop_below()
        if self._starts and self._starts[0] <= self.mark_delete:
            self.mark_delete = self._ends[0]
            del self._starts[0], self._ends[0]

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def to_dict(self) -> dict[str, object]:
        return {"markDelete": self.mark_delete, "acked": self.ranges[:MAX_PERSISTED_RANGES]}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict()).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Cursor:
        raw = json.loads(data)
        return cls(raw["markDelete"], [tuple(r) for r in raw.get("acked", [])])


class CursorStore:
    """Persists one cursor at ``path``, with its subscription's type and the metadata text
    its last commit carried (Kafka's commit metadata); bursts of changes become one
    metadata write.

    Every write is a compare-and-set on the version this store last read or wrote, so
    after a hand-over an old owner can never overwrite the new owner's cursor: its write
    fails with CursorFencedError and it writes nothing more.
    """

    def __init__(
        self,
        meta: MetadataStore,
        path: str,
        cursor: Cursor,
        sub_type: str | None = None,
        *,
        node_version: int = -1,
    ) -> None:
        self.meta = meta
        self.path = path
        self.cursor = cursor
        self.sub_type = sub_type  # Pulsar's name of the type (EXCLUSIVE, SHARED, ...)
        self.metadata: str | None = None  # a client's text about its position (Kafka commits)
        self.leader_epoch: int | None = None  # the leader epoch a Kafka commit named (KIP-320)
        self.fenced = False
        self._node_version = node_version  # -1: the node does not exist yet
        self._written = self._state()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one write at a time: each expects the last one's version

    @classmethod
    async def load(
        cls, meta: MetadataStore, path: str, default_start: int, sub_type: str | None = None
    ) -> CursorStore:
        """The stored cursor, or a new one at ``default_start`` of type ``sub_type``
        (durable when this returns)."""
        node = await meta.get(path)
        if node is None:
            store = cls(meta, path, Cursor(default_start), sub_type)
            await store.flush()
            return store
        raw = json.loads(node.value)
        store = cls(
            meta,
            path,
            Cursor.from_bytes(node.value),
            raw.get("type"),
            node_version=node.stat.version,
        )
        store.metadata = raw.get("metadata")
        store.leader_epoch = raw.get("leaderEpoch")
        store._written = store._state()
        return store

    def to_bytes(self) -> bytes:
        body = self.cursor.to_dict()
        if self.sub_type is not None:
            body["type"] = self.sub_type
        if self.metadata is not None:
            body["metadata"] = self.metadata
        if self.leader_epoch is not None:
            body["leaderEpoch"] = self.leader_epoch
        return json.dumps(body).encode()

    def _state(self) -> tuple[int, str | None, str | None, int | None]:
        return self.cursor.version, self.sub_type, self.metadata, self.leader_epoch

    def changed(self) -> None:
        """Schedule a write of the cursor (coalesced with any other pending change)."""
        if self.fenced:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._write_loop())

    async def _write_loop(self) -> None:
        try:
            while self._written != self._state():
                await self._put()
        except CursorFencedError as e:
            log.error("%s", e)

    async def flush(self) -> None:
        """Write now; durable when this returns. Raises CursorFencedError if another owner
        wrote the cursor since this one last did."""
        if self._task is not None and not self._task.done():
            await self._task
        await self._put()

    async def _put(self) -> None:
        async with self._lock:
            if self.fenced:
                raise CursorFencedError(f"cursor {self.path} belongs to another owner now")
            state = self._state()
            try:
                stat = await self.meta.put(
                    self.path, self.to_bytes(), expected_version=self._node_version
                )
            except (BadVersionError, NodeExistsError, NotFoundError) as e:
                self.fenced = True
                raise CursorFencedError(
                    f"cursor {self.path} was changed by another owner (a newer broker of the "
                    "topic, or a delete); this one stops writing it"
                ) from e
            self._node_version = stat.version
            self._written = state

    async def delete(self) -> None:
        if self._task is not None:
            self._task.cancel()
        async with self._lock:
            if await self.meta.exists(self.path):
                await self.meta.delete(self.path)
            self._node_version = -1
