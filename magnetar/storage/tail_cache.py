"""The tail cache: a partition's most recent entries in memory, so tail reads skip the disk.

Consumers that keep up read what was just written; serving them from memory keeps their
reads off the disk that the journal and catch-up readers use (seed 004's read/write
isolation). The cache is bounded in bytes and evicts the oldest entries first.
"""

from __future__ import annotations

import bisect

from magnetar.core.entries import Entry


class TailCache:
    """Contiguous run of a partition's newest entries, oldest evicted first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: list[Entry] = []
        self._bases: list[int] = []
        self._start = 0  # entries before this index are evicted (compacted lazily)
        self._bytes = 0
        self.hits = 0

    def add(self, entry: Entry) -> None:
        if self._bases and entry.base_offset != self._entries[-1].next_offset:
            self.clear()  # never cache a gap: reads must stay contiguous
        self._entries.append(entry)
        self._bases.append(entry.base_offset)
        self._bytes += entry.stored_size
        while self._bytes > self.max_bytes and self._start < len(self._entries) - 1:
            self._bytes -= self._entries[self._start].stored_size
            self._start += 1
        if self._start > 1024 and self._start * 2 > len(self._entries):
            del self._entries[: self._start], self._bases[: self._start]
            self._start = 0

    @property
    def first_offset(self) -> int:
        """First offset held, or -1 when empty."""
        return self._bases[self._start] if self._start < len(self._bases) else -1

    def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Entry] | None:
        """Entries from the one holding ``offset`` on, or None if ``offset`` is not cached."""
        first = self.first_offset
        if first < 0 or offset < first or offset >= self._entries[-1].next_offset:
            return None
        i = bisect.bisect_right(self._bases, offset, self._start) - 1
        out: list[Entry] = []
        total = 0
        for entry in self._entries[i : i + max_entries]:
            out.append(entry)
            total += entry.stored_size
            if total >= max_bytes:
                break
        self.hits += 1
        return out

    def clear(self) -> None:
        self._entries.clear()
        self._bases.clear()
        self._start = self._bytes = 0
