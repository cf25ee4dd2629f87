"""One partition's runtime state inside the storage engine: segments, tail cache, offsets."""

from __future__ import annotations

import bisect
from pathlib import Path

from magnetar.core.entries import Entry
from magnetar.storage.errors import CorruptionError, OffsetOutOfRangeError, SegmentNotLocalError
from magnetar.storage.ledger_records import Row
from magnetar.storage.open_files import OpenFiles
from magnetar.storage.segment import Segment, SegmentState
from magnetar.storage.tail_cache import TailCache


class PartitionLog:
    """The ordered segments of one partition; the last one is OPEN.

    ``next_offset`` is the offset the next append will get; ``end_offset`` the offset after
    the last *durable* entry (what readers may see). They differ only while a flush runs.
    """

    def __init__(
        self, name: str, partition_id: int, directory: Path, cache: TailCache, files: OpenFiles
    ) -> None:
        self.name = name
        self.partition_id = partition_id
        self.directory = directory
        self.files = files  # the node's open segment files
        self.segments: list[Segment] = []
        self.cache = cache
        self.next_offset = 0
        self.end_offset = 0
        # segment id -> what is wrong with it (file, byte, problem), found by a read or check
        self.damaged: dict[int, str] = {}

    @property
    def open_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def start_offset(self) -> int:
        """First offset still stored (after retention), or ``end_offset`` when empty."""
        for segment in self.segments:
            if segment.info.state is not SegmentState.DELETED:
                return segment.info.first_offset
        return self.end_offset

    def segment_for(self, offset: int) -> Segment:
        """The segment holding ``offset`` (which must be in [start_offset, end_offset))."""
        firsts = [s.info.first_offset for s in self.segments]
        i = bisect.bisect_right(firsts, offset) - 1
        # Empty segments share a first offset with their successor: skip forward past them.
        while i < len(self.segments) - 1 and self.segments[i].info.end_offset <= offset:
            i += 1
        return self.segments[max(i, 0)]

    def _readable(self, offset: int) -> bool:
        """Whether an entry holds ``offset`` (False at the end); OffsetOutOfRangeError
        before the first stored offset."""
        if offset >= self.end_offset:
            return False
        if offset < self.start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.name} is before the first stored offset "
                f"{self.start_offset}; read from there instead"
            )
        return True

    def read(self, offset: int, max_entries: int, max_bytes: int) -> list[Entry]:
        """Entries from the one holding ``offset``; [] at the end. Runs on a reader thread."""
        if not self._readable(offset):
            return []
        cached = self.cache.read(offset, max_entries, max_bytes)
        if cached is not None:
            return cached
        out: list[Entry] = []
        while offset < self.end_offset and len(out) < max_entries and max_bytes > 0:
            segment = self.segment_for(offset)
            if not segment.info.local:
                if out:
                    break  # the caller continues from the tier
                raise SegmentNotLocalError(
                    f"segment {segment.info.segment_id} of {self.name} is offloaded",
                    segment.info.segment_id,
                )
            try:
                got = segment.read(offset, max_entries - len(out), max_bytes, segment.info.size)
            except (CorruptionError, OSError) as e:
                self._failed(segment, offset, e, delivered=bool(out))
                break
            if not got:
                break
            out.extend(got)
            max_bytes -= sum(e.stored_size for e in got)
            offset = got[-1].next_offset
        return out

    def read_ledger(
        self, offset: int, eids: tuple[int, int], max_bytes: int, ledger_id: int
    ) -> list[Entry]:
        """The ledger's entries ``eids`` (first, last) that this partition of its records
        holds one after another from ``offset`` (see :meth:`Segment.read_ledger`), about
        ``max_bytes`` of payload. Runs on a reader thread."""
        if not self._readable(offset):
            return []
        first, last = eids
        out: list[Entry] = []
        while offset < self.end_offset and first <= last and max_bytes > 0:
            segment = self.segment_for(offset)
            try:
                got, offset, size = segment.read_ledger(
                    offset, (first, last), max_bytes, segment.info.size, ledger_id
                )
            except (CorruptionError, OSError) as e:
                self._failed(segment, offset, e, delivered=bool(out))
                break
            if not got:
                break
            out += got
            first += len(got)
            max_bytes -= size
        return out

    def read_rows(self, offset: int, max_entries: int) -> list[Row]:
        """The index rows of a partition of ledger records from the entry at ``offset`` on
        (see :meth:`Segment.read_rows`), at most ``max_entries``. Runs on a reader thread."""
        if not self._readable(offset):
            return []
        out: list[Row] = []
        while offset < self.end_offset and len(out) < max_entries:
            segment = self.segment_for(offset)
            try:
                got = segment.read_rows(offset, max_entries - len(out), segment.info.size)
            except (CorruptionError, OSError) as e:
                self._failed(segment, offset, e, delivered=bool(out))
                break
            if not got:
                break
            out += got
            offset = got[-1][0] + 1
        return out

    def _failed(
        self, segment: Segment, offset: int, error: CorruptionError | OSError, *, delivered: bool
    ) -> None:
        """A read of ``segment`` at ``offset`` failed: raise what a reader can act on, or
        ``error`` (the segment recorded as damaged), unless entries before it were
        ``delivered``: then return, the read stops there and the next one raises."""
        self._explain_vanished(segment, offset)
        self.damaged[segment.info.segment_id] = str(error)
        if not delivered:
            raise error

    def _explain_vanished(self, segment: Segment, offset: int) -> None:
        """A read of ``segment`` failed: if retention deleted it or its local copy was
        dropped after an offload while we read, raise the error a reader can act on. Returns
        (for the caller to re-raise the original error) when the segment is still local."""
        if segment not in self.segments:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.name} was deleted by retention; the first "
                f"stored offset is now {self.start_offset}"
            ) from None
        if not segment.info.local:
            raise SegmentNotLocalError(
                f"segment {segment.info.segment_id} of {self.name} is offloaded",
                segment.info.segment_id,
            ) from None

    def find_offset(self, ts: int) -> int:
        """First offset whose publish time is >= ``ts``; ``end_offset`` if there is none."""
        live = [s for s in self.segments if s.info.state is not SegmentState.DELETED]
        # The running maximum of publish times over segments never decreases: bisect on it.
        running, maxima = -(1 << 63), []
        for s in live:
            running = max(running, s.info.max_publish_time)
            maxima.append(running)
        i = bisect.bisect_left(maxima, ts)
        for segment in live[i:]:
            if not segment.info.local:
                raise SegmentNotLocalError(
                    f"segment {segment.info.segment_id} of {self.name} is offloaded",
                    segment.info.segment_id,
                )
            found = segment.find_time(ts, segment.info.size)
            if found is not None:
                return max(found, self.start_offset)
        return self.end_offset

    def find_in_segment(self, segment_id: int, ts: int) -> int | None:
        """First offset with publish time >= ``ts`` inside one local segment, or None."""
        for segment in self.segments:
            if segment.info.segment_id == segment_id:
                try:
                    return segment.find_time(ts, segment.info.size)
                except (CorruptionError, OSError) as e:
                    self._explain_vanished(segment, segment.info.first_offset)
                    self.damaged[segment_id] = str(e)
                    raise
        raise OffsetOutOfRangeError(f"segment {segment_id} of {self.name} no longer exists")

    def next_readable(self, offset: int) -> int:
        """The first offset after ``offset`` whose read succeeds, in the segment holding
        ``offset``; that segment's end if none does (runs on a reader thread).

        A read scans from the index point before its offset, so past a damaged entry reads
        fail up to the next index point and succeed from there: a binary search finds the
        first that succeeds, an entry's start. Entries between the damage and that point
        are skipped with it (no index tells where they begin)."""
        segment = self.segment_for(offset)
        lo, hi = offset + 1, segment.info.end_offset
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                segment.read(mid, 1, 1, segment.info.size)
            except (CorruptionError, OSError):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def check(self) -> list[dict[str, object]]:
        """Read every entry of every local segment, verifying each checksum (a scrub; runs on
        a reader thread). One row per segment: its id, state, entries found, and ``error``
        (file, byte, problem) or ``""``. Updates :attr:`damaged` with what it finds."""
        rows: list[dict[str, object]] = []
        for segment in list(self.segments):
            info = segment.info
            row: dict[str, object] = {"segmentId": info.segment_id, "state": info.state.value}
            if info.state is SegmentState.DELETED or not info.local:
                rows.append({**row, "entries": info.entries, "error": "", "local": False})
                continue
            found, error = 0, ""
            try:
                for _ in segment.iter_entries(0, info.size):
                    found += 1
            except (CorruptionError, OSError) as e:
                error = str(e)
            if error:
                self.damaged[info.segment_id] = error
            else:
                self.damaged.pop(info.segment_id, None)
            rows.append({**row, "entries": found, "error": error, "local": True})
        return rows

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
