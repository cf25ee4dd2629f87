"""Sparse per-segment indexes: offset → file position, and publish time → file position.

Both add a point every ``interval`` bytes of segment data (and at the first entry), so a
lookup lands at most ``interval`` bytes before the entry it wants and scans forward.

The time index stores, at each point, the largest publish time of every entry *before*
that point. That running maximum never decreases even when producers' clocks disagree,
so "the first entry whose publish time is >= ts" is found by a binary search for the
last point whose maximum is still < ts, then a forward scan.
"""

from __future__ import annotations

import bisect
import struct
from array import array

_OFFSET_POINT = struct.Struct(">qq")
_TIME_POINT = struct.Struct(">qq")
NO_TIME = -(1 << 63)


class OffsetIndex:
    """Sorted (base offset, position) points of one segment."""

    def __init__(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")

    def add(self, offset: int, position: int) -> None:
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed entry whose base offset is <= ``offset`` (else 0)."""
        i = self.point(offset)
        return self.positions[i] if i >= 0 else 0

    def point(self, offset: int) -> int:
        """Index of the last point whose base offset is <= ``offset``, or -1."""
        return bisect.bisect_right(self.offsets, offset) - 1

    def __len__(self) -> int:
        return len(self.offsets)

    def to_bytes(self) -> bytes:
        return b"".join(
            _OFFSET_POINT.pack(o, p) for o, p in zip(self.offsets, self.positions, strict=False)
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> OffsetIndex:
        index = cls()
        for o, p in _OFFSET_POINT.iter_unpack(data[: len(data) - len(data) % 16]):
            index.add(o, p)
        return index


class TimeIndex:
    """Sorted (max publish time before the point, position) points of one segment."""

    def __init__(self) -> None:
        self.max_before = array("q")
        self.positions = array("q")

    def add(self, max_before: int, position: int) -> None:
        self.max_before.append(max_before)
        self.positions.append(position)

    def lookup(self, ts: int) -> int:
        """Position to scan from for the first entry with publish time >= ``ts``."""
        i = self.point(ts)
        return self.positions[i] if i >= 0 else 0

    def point(self, ts: int) -> int:
        """Index of the point to scan from for publish time ``ts``, or -1 (the start)."""
        return bisect.bisect_left(self.max_before, ts) - 1

    def __len__(self) -> int:
        return len(self.positions)

    def to_bytes(self) -> bytes:
        return b"".join(
            _TIME_POINT.pack(t, p) for t, p in zip(self.max_before, self.positions, strict=False)
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TimeIndex:
        index = cls()
        for t, p in _TIME_POINT.iter_unpack(data[: len(data) - len(data) % 16]):
            index.add(t, p)
        return index


class IndexBuilder:
    """Feeds both indexes as entries are appended to a segment."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.offsets = OffsetIndex()
        self.times = TimeIndex()
        self.max_publish_time = NO_TIME
        self._last_point = -interval

    def on_entry(self, base_offset: int, publish_time: int, position: int) -> None:
        if position - self._last_point >= self.interval:
            self.offsets.add(base_offset, position)
            self.times.add(self.max_publish_time, position)
            self._last_point = position
        self.max_publish_time = max(self.max_publish_time, publish_time)
