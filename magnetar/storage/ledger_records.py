"""The stored form of a ledger entry (a segment of the segment-addressed writer).

A ledger's entries are kept as entries of an engine partition, each payload a *record*:
the ledger entry id, the entry's offsets and times, then the producer's payload (the same
facts as :class:`~magnetar.core.entries.Entry`). Storage nodes store and send records in
this form (``magnetar.cluster.wire``), and :class:`~magnetar.storage.ledger_store.LedgerStore`
rebuilds a ledger's index from them, so the layout is an on-disk format: never change it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from magnetar.core.entries import Entry
from magnetar.storage.records import ENTRY_HEADER_SIZE, RecordError, decode_header

RECORD = struct.Struct(">QQIqqB")  # entry id, base offset, count, publish, event time, format


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a ledger: ``entry_id`` is its place in the ledger (0, 1, …)."""

    entry_id: int
    base_offset: int
    count: int
    publish_time: int
    event_time: int
    format: int
    payload: bytes

    def pack(self) -> bytes:
        head = RECORD.pack(
            self.entry_id,
            self.base_offset,
            self.count,
            self.publish_time,
            self.event_time,
            self.format,
        )
        return head + self.payload

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> Record:
        eid, base, count, ts, event, fmt = RECORD.unpack_from(data)
        return cls(eid, base, count, ts, event, fmt, bytes(data[RECORD.size :]))

    @classmethod
    def of(cls, entry_id: int, entry: Entry) -> Record:
        return cls(
            entry_id,
            entry.base_offset,
            entry.count,
            entry.publish_time,
            entry.event_time,
            entry.format,
            entry.payload,
        )

    def entry(self, ledger_id: int) -> Entry:
        return Entry(
            self.base_offset,
            self.count,
            self.publish_time,
            self.event_time,
            self.format,
            self.payload,
            segment_id=ledger_id,
        )


def pack_entry(entry_id: int, entry: Entry) -> bytes:
    """``Record.of(entry_id, entry).pack()``, without the record in between (the local
    writer's path: one per append)."""
    e = entry
    head = RECORD.pack(entry_id, e.base_offset, e.count, e.publish_time, e.event_time, e.format)
    return head + e.payload


def decode_stored(ledger_id: int, buf: bytes, pos: int) -> tuple[tuple[int, int, Entry], int]:
    """The record that the engine's entry at ``buf[pos:]`` stores, checked as the engine
    checks its entries: ((the engine entry's offset, the record's entry id, the ledger's
    entry), the position after it). One Entry and one payload copy: the local reader's
    path (bound to its ledger once per read, then called per entry without keywords).
    Raises RecordError."""
    local, _, _, _, _, end = decode_header(buf, pos)
    start = pos + ENTRY_HEADER_SIZE
    if end - start < RECORD.size:
        raise RecordError("ledger record cut short", torn=False)
    eid, base, count, ts, event, fmt = RECORD.unpack_from(buf, start)
    payload = bytes(buf[start + RECORD.size : end])
    return (local, eid, Entry(base, count, ts, event, fmt, payload, ledger_id)), end


Row = tuple[int, int, int, int, int]  # engine offset, entry id, base offset, count, publish time


def decode_row(buf: bytes, pos: int) -> tuple[Row, int]:
    """The index row of the record that the engine's entry at ``buf[pos:]`` stores, checked
    as :func:`decode_stored` checks it, with no payload copied: (the engine entry's offset,
    the record's entry id, base offset, count, publish time), the position after it. The
    path of a ledger store rebuilding its index at start. Raises RecordError."""
    local, _, _, _, _, end = decode_header(buf, pos)
    start = pos + ENTRY_HEADER_SIZE
    if end - start < RECORD.size:
        raise RecordError("ledger record cut short", torn=False)
    eid, base, count, ts, _, _ = RECORD.unpack_from(buf, start)
    return (local, eid, base, count, ts), end


def row_of(stored: Entry) -> Row:
    """:func:`decode_row` of an engine entry already decoded (from the engine's cache)."""
    eid, base, count, ts, _, _ = RECORD.unpack_from(stored.payload)
    return stored.base_offset, eid, base, count, ts


def entries_of(
    stored: list[Entry], eids: tuple[int, int], max_bytes: int, ledger_id: int
) -> list[Entry]:
    """The ledger's entries ``eids`` (first, last) that the engine's entries ``stored``
    hold as records, one after another, while fewer than ``max_bytes`` of payload are
    taken (at least one): the reader's path when the engine's own cache answers."""
    out: list[Entry] = []
    eid, last = eids
    size = 0
    for e in stored:
        data = e.payload
        found, base, count, ts, event, fmt = RECORD.unpack_from(data)
        if found != eid or eid > last or size >= max_bytes:
            break
        payload = data[RECORD.size :]
        out.append(Entry(base, count, ts, event, fmt, payload, ledger_id))
        size += len(payload)
        eid += 1
    return out
