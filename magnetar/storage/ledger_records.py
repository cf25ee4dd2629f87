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
