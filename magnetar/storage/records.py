"""Byte layout of entries and journal records. Pure code: bytes in, values out.

An *entry* is one producer batch as received (DESIGN.md decision 2)::

    [u32 length][u32 crc32c][u8 version][u8 format][u16 flags]
    [i64 base_offset][i32 count][i64 publish_time][i64 event_time][payload]

``length`` counts every byte after itself; the CRC32C covers every byte after itself. A
segment file is a plain sequence of entries. A *journal record* prefixes an entry with the
partition it belongs to and a CRC32C over that id and the entry's header::

    [u32 partition_id][u32 crc32c(partition_id + entry header)][entry]

The header CRC protects the id and the entry's own CRC, which protects the payload, so
each payload is checksummed exactly once on the write path.
"""

from __future__ import annotations

import struct

import crc32c

from magnetar.core.entries import ENTRY_HEADER_SIZE as _CORE_HEADER_SIZE
from magnetar.core.entries import Entry
from magnetar.storage.errors import InvalidEntryError

VERSION = 1
ENTRY_HEADER = struct.Struct(">IIBBHqiqq")
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # 40
assert ENTRY_HEADER_SIZE == _CORE_HEADER_SIZE  # Entry.stored_size counts on it
_AFTER_CRC = struct.Struct(">BBHqiqq")
JOURNAL_PREFIX = struct.Struct(">II")
JOURNAL_PREFIX_SIZE = JOURNAL_PREFIX.size  # 8
_PID = struct.Struct(">I")
MAX_ENTRY_SIZE = 1 << 30


class RecordError(ValueError):
    """Bytes at a position do not form a valid record; ``torn`` if they simply end early."""

    def __init__(self, problem: str, *, torn: bool) -> None:
        super().__init__(problem)
        self.torn = torn


def encode_header(
    base_offset: int, count: int, publish_time: int, event_time: int, fmt: int, payload: bytes
) -> bytes:
    """The 40-byte entry header for ``payload`` (write the payload right after it)."""
    rest = _AFTER_CRC.pack(VERSION, fmt, 0, base_offset, count, publish_time, event_time)
    crc = crc32c.crc32c(payload, crc32c.crc32c(rest))
    return struct.pack(">II", ENTRY_HEADER_SIZE - 4 + len(payload), crc) + rest


_INT64 = (-(1 << 63), (1 << 63) - 1)


def check_header_fields(
    count: int, publish_time: int, event_time: int, fmt: int, size: int
) -> None:
    """Raise InvalidEntryError unless an entry header can hold these values."""
    lo, hi = _INT64
    if (
        0 < count < 1 << 31
        and lo <= publish_time <= hi
        and lo <= event_time <= hi
        and 0 <= fmt < 256
        and size <= MAX_ENTRY_SIZE
    ):
        return  # every append pays for this check: the common case says so at once
    problems = [
        f"count {count} is not within 1..{(1 << 31) - 1}" if not 0 < count < 1 << 31 else "",
        f"publish time {publish_time} does not fit in int64"
        if not _INT64[0] <= publish_time <= _INT64[1]
        else "",
        f"event time {event_time} does not fit in int64"
        if not _INT64[0] <= event_time <= _INT64[1]
        else "",
        f"format {fmt} is not within 0..255" if not 0 <= fmt < 256 else "",
        f"payload of {size} bytes exceeds {MAX_ENTRY_SIZE}" if size > MAX_ENTRY_SIZE else "",
    ]
    problem = "; ".join(p for p in problems if p)
    if problem:
        raise InvalidEntryError(f"entry refused: {problem}")


def journal_prefix(partition_id: int, header: bytes) -> bytes:
    pid = _PID.pack(partition_id)
    return JOURNAL_PREFIX.pack(partition_id, crc32c.crc32c(header, crc32c.crc32c(pid)))


def decode_entry(
    buf: bytes | memoryview, pos: int, *, segment_id: int = -1, verify: bool = True
) -> tuple[Entry, int]:
    """Decode the entry at ``buf[pos:]``; returns it and the position after it.

    Raises RecordError (``torn=True`` when the buffer ends inside the entry).
    """
    base, count, pt, et, fmt, end = decode_header(buf, pos, verify=verify)
    payload = bytes(buf[pos + ENTRY_HEADER_SIZE : end])
    return Entry(base, count, pt, et, fmt, payload, segment_id), end


def decode_header(
    buf: bytes | memoryview, pos: int, *, verify: bool = True
) -> tuple[int, int, int, int, int, int]:
    """The entry at ``buf[pos:]``, checked (its checksum too, if ``verify``): its base
    offset, count, publish time, event time, format and the position after it; the
    payload lies from ``pos + ENTRY_HEADER_SIZE`` to there. Raises as :func:`decode_entry`.
    """
    end_of_buf = len(buf)
    if pos + ENTRY_HEADER_SIZE > end_of_buf:
        raise RecordError("entry header cut short", torn=True)
    length, crc, version, fmt, _flags, base, count, pt, et = ENTRY_HEADER.unpack_from(buf, pos)
    if version != VERSION or length < ENTRY_HEADER_SIZE - 4 or length > MAX_ENTRY_SIZE:
        raise RecordError(f"bad entry header (version {version}, length {length})", torn=False)
    end = pos + 4 + length
    if end > end_of_buf:
        raise RecordError("entry cut short", torn=True)
    if verify and crc32c.crc32c(buf[pos + 8 : end]) != crc:
        raise RecordError("entry checksum mismatch", torn=False)
    if count <= 0 or base < 0:
        raise RecordError(f"bad entry fields (offset {base}, count {count})", torn=False)
    return base, count, pt, et, fmt, end


def decode_journal_record(buf: bytes | memoryview, pos: int) -> tuple[int, Entry, int]:
    """Decode a journal record: (partition id, entry, position after it). Raises RecordError."""
    if pos + JOURNAL_PREFIX_SIZE + ENTRY_HEADER_SIZE > len(buf):
        raise RecordError("journal record cut short", torn=True)
    pid, hcrc = JOURNAL_PREFIX.unpack_from(buf, pos)
    header = buf[pos + JOURNAL_PREFIX_SIZE : pos + JOURNAL_PREFIX_SIZE + ENTRY_HEADER_SIZE]
    if crc32c.crc32c(header, crc32c.crc32c(_PID.pack(pid))) != hcrc:
        # A zero-filled or half-written tail looks like this too; the caller decides.
        raise RecordError("journal record header checksum mismatch", torn=False)
    entry, end = decode_entry(buf, pos + JOURNAL_PREFIX_SIZE)
    return pid, entry, end


def claimed_range(buf: bytes | memoryview, pos: int, prefix: int) -> tuple[int, int] | None:
    """(base offset, count) that the possibly damaged header at ``pos`` claims, after
    ``prefix`` bytes (the journal's partition prefix, or 0), or None if too little is left.
    Unchecked: for reports about a cut tail, never for reading data."""
    start = pos + prefix
    if start + ENTRY_HEADER_SIZE > len(buf):
        return None
    _, _, _, _, _, base, count, _, _ = ENTRY_HEADER.unpack_from(buf, start)
    return int(base), int(count)
