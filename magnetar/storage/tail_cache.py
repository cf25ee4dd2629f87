"""The tail cache: each partition's most recent entries in memory, so tail reads skip the disk.

Consumers that keep up read what was just written; serving them from memory keeps their
reads off the disk that the journal and catch-up readers use (seed 004's read/write
isolation). Every partition's cache draws on one :class:`CacheBudget` per node (Pulsar's
``managedLedgerCacheSizeMB``): when the node's cached bytes exceed it, the oldest entries go
first, whichever partition holds them, and an evicted entry's memory is released at once.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque

from magnetar.core.entries import Entry


class CacheBudget:
    """The byte budget shared by every tail cache of a node, evicting oldest first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.entries = 0
        self.evictions = 0
        # (cache, entry sequence) in insertion order; entries a cache dropped by itself
        # (cleared on a gap) stay here until met, and are skipped then.
        self._order: deque[tuple[TailCache, int]] = deque()
        self._seq = itertools.count()

    def cache(self) -> TailCache:
        """A new, empty tail cache drawing on this budget."""
        return TailCache(self)

    def _next_seq(self) -> int:
        return next(self._seq)

    def _added(self, cache: TailCache, seq: int, size: int) -> None:
        """Charge an entry ``cache`` holds already; evict the oldest while over budget."""
        self._order.append((cache, seq))
        self.bytes += size
        self.entries += 1
        while self.bytes > self.max_bytes and self._order:
            owner, oldest = self._order.popleft()
            if owner._evict_if_oldest(oldest):
                self.evictions += 1
        if len(self._order) > 2 * self.entries + 1024:  # many stale marks: drop them
            self._order = deque((c, s) for c, s in self._order if c._holds(s))

    def _released(self, size: int, count: int) -> None:
        self.bytes -= size
        self.entries -= count


class TailCache:
    """Contiguous run of a partition's newest entries, oldest evicted first."""

    def __init__(self, budget: CacheBudget) -> None:
        self.budget = budget
        self._entries: list[Entry | None] = []  # None: evicted, memory released
        self._bases: list[int] = []
        self._seqs: list[int] = []
        self._start = 0  # slots before this index are evicted (compacted lazily)
        self._bytes = 0
        self.hits = 0

    def add(self, entry: Entry) -> None:
        last = self._entries[-1] if self._start < len(self._entries) else None
        if last is not None and entry.base_offset != last.next_offset:
            self.clear()  # never cache a gap: reads must stay contiguous
        seq = self.budget._next_seq()
        self._entries.append(entry)
        self._bases.append(entry.base_offset)
        self._seqs.append(seq)
        self._bytes += entry.stored_size
        self.budget._added(self, seq, entry.stored_size)

    def _holds(self, seq: int) -> bool:
        i = bisect.bisect_left(self._seqs, seq, self._start)
        return i < len(self._seqs) and self._seqs[i] == seq

    def _evict_if_oldest(self, seq: int) -> bool:
        if self._start >= len(self._entries) or self._seqs[self._start] != seq:
            return False  # dropped already (cleared after a gap)
        entry = self._entries[self._start]
        assert entry is not None
        self._entries[self._start] = None
        self._bytes -= entry.stored_size
        self.budget._released(entry.stored_size, 1)
        self._start += 1
        if self._start > 64 and self._start * 2 > len(self._entries):
            del self._entries[: self._start], self._bases[: self._start]
            del self._seqs[: self._start]
            self._start = 0
        return True

    @property
    def first_offset(self) -> int:
        """First offset held, or -1 when empty."""
        return self._bases[self._start] if self._start < len(self._bases) else -1

    def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Entry] | None:
        """Entries from the one holding ``offset`` on, or None if ``offset`` is not cached."""
        first = self.first_offset
        last = self._entries[-1] if first >= 0 else None
        if last is None or offset < first or offset >= last.next_offset:
            return None
        i = bisect.bisect_right(self._bases, offset, self._start) - 1
        out: list[Entry] = []
        total = 0
        for entry in self._entries[i : i + max_entries]:
            assert entry is not None
            out.append(entry)
            total += entry.stored_size
            if total >= max_bytes:
                break
        self.hits += 1
        return out

    def clear(self) -> None:
        self.budget._released(self._bytes, len(self._entries) - self._start)
        self._entries.clear()
        self._bases.clear()
        self._seqs.clear()
        self._start = self._bytes = 0
