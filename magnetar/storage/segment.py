"""Segment files: one partition's entries, in offset order, in one append-only file.

A partition has exactly one OPEN segment, written by the engine's flusher; every other
segment is CLOSED and never changes again (DESIGN.md decision 4). A segment's metadata
(:class:`SegmentInfo`) lives in the metadata store; its data in ``<id>.log`` with the two
sparse indexes in ``<id>.index`` and ``<id>.timeindex`` written when it closes.
"""

from __future__ import annotations

import enum
import functools
import itertools
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from magnetar.storage.errors import CorruptionError
from magnetar.storage.fileio import write_file_durably
from magnetar.storage.index import NO_TIME, IndexBuilder, OffsetIndex, TimeIndex
from magnetar.storage.ledger_records import Row, decode_row, decode_stored
from magnetar.storage.open_files import APPEND, READ, OpenFiles
from magnetar.storage.records import (
    ENTRY_HEADER_SIZE,
    MAX_ENTRY_SIZE,
    Entry,
    RecordError,
    decode_entry,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
Decode = Callable[[bytes, int], tuple[T, int]]  # the file's bytes at a position -> (it, after)
_LENGTH = struct.Struct(">I")
READ_CHUNK = 1 << 20


class SegmentState(enum.StrEnum):
    OPEN = "OPEN"  # takes appends; the last segment of its partition
    CLOSED = "CLOSED"  # immutable and fsynced, indexes on disk
    OFFLOADING = "OFFLOADING"  # closed; a copy is being written to the object store
    OFFLOADED = "OFFLOADED"  # closed; a verified copy lives in the object store
    DELETED = "DELETED"  # removed by retention; kept in metadata only until trimmed


@dataclass(slots=True)
class SegmentInfo:
    """A segment's metadata record. ``end_offset`` is exclusive: the next offset after it."""

    segment_id: int
    partition_id: int
    state: SegmentState
    first_offset: int
    end_offset: int
    entries: int = 0
    size: int = 0
    first_publish_time: int = NO_TIME
    max_publish_time: int = NO_TIME
    created_ms: int = 0
    closed_ms: int = 0
    local: bool = True  # False once an offloaded segment's local files are deleted
    offload: dict[str, Any] | None = None  # object key, manifest, checksum (tier's business)

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1

    @property
    def is_empty(self) -> bool:
        return self.end_offset == self.first_offset

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> SegmentInfo:
        raw = json.loads(data)
        raw["state"] = SegmentState(raw["state"])
        return cls(**raw)


def segment_file(directory: Path, segment_id: int, suffix: str = ".log") -> Path:
    return directory / f"{segment_id:020d}{suffix}"


class Segment:
    """Runtime view of one segment: its file, its indexes and its metadata record. Its
    descriptors are borrowed from the node's :class:`OpenFiles` for each use."""

    def __init__(
        self, info: SegmentInfo, directory: Path, index_interval: int, files: OpenFiles
    ) -> None:
        self.info = info
        self.path = segment_file(directory, info.segment_id)
        self.index_interval = index_interval
        self.files = files
        self._builder: IndexBuilder | None = None
        self._offsets: OffsetIndex | None = None
        self._times: TimeIndex | None = None
        self.version = -1  # metadata version of ``info``
        self.index_rebuilds = 0  # indexes that did not verify and were rebuilt from the file

    # -- the open segment ---------------------------------------------------------------

    def open_for_append(self) -> None:
        """Create the file if need be and start an empty in-memory index."""
        with self.writing():
            pass
        self._builder = IndexBuilder(self.index_interval)

    @contextmanager
    def writing(self) -> Iterator[int]:
        """A descriptor that appends to the file, held open for the block (writer thread)."""
        with self.files.use(self.path, APPEND) as fd:
            yield fd

    def on_appended(self, entry: Entry, position: int) -> None:
        """Account for ``entry`` written at ``position`` (called after it is in the file)."""
        info = self.info
        assert self._builder is not None
        self._builder.on_entry(entry.base_offset, entry.publish_time, position)
        if info.entries == 0:
            info.first_publish_time = entry.publish_time
        info.entries += 1
        info.size = position + entry.stored_size
        info.end_offset = entry.next_offset
        info.max_publish_time = max(info.max_publish_time, entry.publish_time)

    def seal(self) -> None:
        """Write both indexes durably and fsync the data. The segment stays writable until
        :meth:`finish_seal`, so a roll that fails later can simply be retried."""
        assert self._builder is not None
        with self.writing() as fd:
            os.fsync(fd)
        parent, sid = self.path.parent, self.info.segment_id
        write_file_durably(segment_file(parent, sid, ".index"), self._builder.offsets.to_bytes())
        write_file_durably(segment_file(parent, sid, ".timeindex"), self._builder.times.to_bytes())

    def finish_seal(self) -> None:
        """The segment is CLOSED for good: stop taking appends."""
        if self._builder is not None:
            self._offsets, self._times = self._builder.offsets, self._builder.times
            self._builder = None
        self.files.forget(self.path)

    # -- reads --------------------------------------------------------------------------

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        if self._builder is not None:
            return self._builder.offsets, self._builder.times
        if self._offsets is None or self._times is None:
            self._load_indexes()
        assert self._offsets is not None and self._times is not None
        return self._offsets, self._times

    def _load_indexes(self) -> None:
        parent, sid = self.path.parent, self.info.segment_id
        try:
            offsets = OffsetIndex.from_bytes(segment_file(parent, sid, ".index").read_bytes())
            times = TimeIndex.from_bytes(segment_file(parent, sid, ".timeindex").read_bytes())
        except FileNotFoundError:
            self._rebuild_indexes("missing")
            return
        problem = self._implausible(offsets, times)
        if problem:
            self._rebuild_indexes(problem)
        else:
            self._offsets, self._times = offsets, times

    def _implausible(self, offsets: OffsetIndex, times: TimeIndex) -> str:
        """Why these indexes cannot belong to this segment, or "" (a structural check)."""
        info, positions = self.info, list(offsets.positions)
        if positions != list(times.positions):
            return "the two indexes disagree"
        if positions and (positions[0] != 0 or positions[-1] >= max(info.size, 1)):
            return "a position lies outside the file"
        if any(b <= a for a, b in itertools.pairwise(positions)):
            return "positions out of order"
        offs = list(offsets.offsets)
        if offs and (offs[0] != info.first_offset or offs[-1] >= info.end_offset):
            return "an offset lies outside the segment"
        if any(b <= a for a, b in itertools.pairwise(offs)):
            return "offsets out of order"
        if any(b < a for a, b in itertools.pairwise(times.max_before)):
            return "times out of order"
        return ""

    def _rebuild_indexes(self, why: str) -> None:
        """Scan the segment (verifying every entry) and rewrite both indexes."""
        log.warning(
            "index of segment %s (%s) did not verify: %s; rebuilding it",
            self.info.segment_id,
            self.path,
            why,
        )
        builder = IndexBuilder(self.index_interval)
        for pos, entry in self.iter_entries(0, self.info.size):
            builder.on_entry(entry.base_offset, entry.publish_time, pos)
        self._offsets, self._times = builder.offsets, builder.times
        if self.info.state is not SegmentState.OPEN:
            parent, sid = self.path.parent, self.info.segment_id
            write_file_durably(segment_file(parent, sid, ".index"), builder.offsets.to_bytes())
            write_file_durably(segment_file(parent, sid, ".timeindex"), builder.times.to_bytes())
        self.index_rebuilds += 1

    def _start_at(self, point: int) -> tuple[int, int | None]:
        """(file position, base offset expected there) of index point ``point`` (-1: the
        file's start)."""
        offsets, _ = self._indexes()
        if point < 0:
            return 0, self.info.first_offset
        return offsets.positions[point], offsets.offsets[point]

    def _from_point(
        self, locate: Callable[[], int], end: int, decode: Decode[T], base_of: Callable[[T], int]
    ) -> Iterator[tuple[int, T]]:
        """Entries from the index point ``locate()`` picks, each as ``decode`` makes it. The
        first one must be the entry the index names there (``base_of`` tells its offset);
        if not, the index is wrong (it would skip entries silently): rebuild it and start
        again from the point the rebuilt index picks."""
        for attempt in range(2):
            pos, expected = self._start_at(locate())
            entries = self._decoded(pos, end, decode)
            try:
                first = next(entries, None)
            except CorruptionError:
                if attempt or self._builder is not None:
                    raise
                first = None  # an index position inside an entry: rebuild below
            if first is None and pos >= end:
                return
            if first is not None and base_of(first[1]) == expected:
                yield first
                yield from entries
                return
            if attempt or self._builder is not None:
                raise CorruptionError(str(self.path), pos, "no entry where the index says")
            self._rebuild_indexes(f"no entry of offset {expected} at position {pos}")

    @contextmanager
    def _reading(self) -> Iterator[int]:
        try:
            with self.files.use(self.path, READ) as fd:
                yield fd
        except FileNotFoundError:
            raise CorruptionError(str(self.path), 0, "segment file is missing") from None

    def iter_entries(self, pos: int, end: int) -> Iterator[tuple[int, Entry]]:
        """Entries from byte ``pos`` up to byte ``end``, verified; CorruptionError on damage.
        The file stays open (pinned) until the iterator is exhausted or closed."""
        return self._decoded(pos, end, self._decode)

    @property
    def _decode(self) -> Decode[Entry]:
        """The engine's decoding of this file's entries."""
        return functools.partial(decode_entry, segment_id=self.info.segment_id)

    def _decoded(self, pos: int, end: int, decode: Decode[T]) -> Iterator[tuple[int, T]]:
        """:meth:`iter_entries`, each entry as ``decode`` makes it from the file's bytes."""
        with self._reading() as fd:
            yield from self._entries(fd, pos, end, decode)

    def _entries(self, fd: int, pos: int, end: int, decode: Decode[T]) -> Iterator[tuple[int, T]]:
        buf, buf_start = b"", pos
        while pos < end:
            rel = pos - buf_start
            if rel + ENTRY_HEADER_SIZE > len(buf):
                buf, buf_start, rel = os.pread(fd, READ_CHUNK, pos), pos, 0
            if len(buf) - rel < 4:
                raise CorruptionError(str(self.path), pos, "file ends inside the written range")
            need = 4 + _LENGTH.unpack_from(buf, rel)[0]
            if need > MAX_ENTRY_SIZE or pos + need > end:
                raise CorruptionError(str(self.path), pos, "entry length runs past the data")
            if rel + need > len(buf):
                buf, buf_start, rel = os.pread(fd, max(READ_CHUNK, need), pos), pos, 0
            try:
                entry, after = decode(buf, rel)
            except RecordError as e:
                raise CorruptionError(str(self.path), pos, str(e)) from None
            yield pos, entry
            pos += after - rel

    def read(self, offset: int, max_entries: int, max_bytes: int, end: int) -> list[Entry]:
        """Entries holding ``offset`` onwards, up to byte ``end`` of the file.

        Returns at least one entry if any exists, then stops at ``max_entries`` or once
        ``max_bytes`` of payload have been gathered. Damage stops the read *after* the intact
        entries before it: they are returned, and the read that starts at the damaged
        entry raises CorruptionError (naming file and position).
        """
        out: list[Entry] = []
        total = 0
        locate = lambda: self._indexes()[0].point(offset)  # noqa: E731
        try:
            for _, entry in self._from_point(locate, end, self._decode, _base):
                if entry.next_offset <= offset:
                    continue
                out.append(entry)
                total += entry.stored_size
                if len(out) >= max_entries or total >= max_bytes:
                    break
        except CorruptionError:
            if not out:
                raise
        return out

    def read_ledger(
        self, offset: int, eids: tuple[int, int], max_bytes: int, end: int, ledger_id: int
    ) -> tuple[list[Entry], int, int]:
        """:meth:`read` of a ledger's partition (``magnetar.storage.ledger_records``: each
        entry a record of one message), from the entry at ``offset``: the ledger's entries
        ``eids`` (first, last) in order while the file holds them one after another, each
        decoded once from the file's bytes (no entry of the engine's own in between). Stops
        at ``max_bytes`` of payload. Returns them, the offset after the last and their
        payload bytes."""
        out: list[Entry] = []
        eid, last = eids
        total = 0
        locate = lambda: self._indexes()[0].point(offset)  # noqa: E731
        decode = functools.partial(decode_stored, ledger_id)
        try:
            for _, (local, found, entry) in self._from_point(locate, end, decode, _local):
                if local < offset:
                    continue
                if found != eid or eid > last or total >= max_bytes:
                    break
                out.append(entry)
                total += len(entry.payload)
                eid, offset = eid + 1, local + 1
        except CorruptionError:
            if not out:
                raise
        return out, offset, total

    def read_rows(self, offset: int, max_entries: int, end: int) -> list[Row]:
        """The index rows (``ledger_records.decode_row``) of a ledger partition's entries
        from the one at ``offset``, at most ``max_entries``, up to byte ``end``: each entry
        checked, no payload copied. Damage stops the read as :meth:`read` does."""
        out: list[Row] = []
        locate = lambda: self._indexes()[0].point(offset)  # noqa: E731
        try:
            for _, row in self._from_point(locate, end, decode_row, _local):
                if row[0] < offset:
                    continue
                out.append(row)
                if len(out) >= max_entries:
                    break
        except CorruptionError:
            if not out:
                raise
        return out

    def find_time(self, ts: int, end: int) -> int | None:
        """Base offset of the first entry with publish time >= ``ts``, or None."""
        locate = lambda: self._indexes()[1].point(ts)  # noqa: E731
        for _, entry in self._from_point(locate, end, self._decode, _base):
            if entry.publish_time >= ts:
                return entry.base_offset
        return None

    def close(self) -> None:
        self.files.forget(self.path)


def _base(entry: Entry) -> int:
    return entry.base_offset


def _local(stored: tuple[int, ...] | tuple[int, int, Entry]) -> int:
    return stored[0]


def scan_valid_prefix(path: Path) -> tuple[list[tuple[int, Entry]], int, str]:
    """Recovery scan of an open segment: the valid entries, the valid length, and the
    reason the scan stopped ("" at a clean end of file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0, ""
    out: list[tuple[int, Entry]] = []
    pos = 0
    while pos < len(data):
        try:
            entry, after = decode_entry(data, pos)
        except RecordError as e:
            return out, pos, str(e)
        out.append((pos, entry))
        pos = after
    return out, pos, ""
