"""The entry: the unit every layer passes along (DESIGN.md decision 2).

An entry is one producer batch as received, with the few facts about it that the log needs:
the offsets it covers, its publish and event time, and the format byte that says which
protocol's codec reads it (``magnetar.core.formats``). Storage persists entries, the
managed ledger hands them out, the broker dispatches them, protocols and the tier convert
them; none of them needs to know where an entry was stored to use one.
"""

from __future__ import annotations

from magnetar.core.values import value_class

ENTRY_HEADER_SIZE = 40  # bytes the storage engine writes before each payload


@value_class()
class Entry:
    """One stored entry: ``count`` messages numbered ``base_offset`` .. ``base_offset+count-1``."""

    base_offset: int
    count: int
    publish_time: int
    event_time: int
    format: int
    payload: bytes
    segment_id: int = -1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1

    @property
    def stored_size(self) -> int:
        """Bytes the entry takes in a segment file: its header and payload."""
        return ENTRY_HEADER_SIZE + len(self.payload)
