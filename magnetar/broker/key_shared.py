"""Key_Shared dispatch decisions, as Pulsar makes them: which entries go out now and which
wait in the subscription's replay set.

A consumer without permits must not stall the others: its entries wait (are *parked*) while
entries of other keys go on. Per-key order holds because, within one pass, a key that has an
entry waiting holds back every later entry of that key, and waiting entries are offered again
first, in offset order. A key whose owner changed (a consumer joined or left) while the old
owner still holds unacknowledged entries of it waits until those are settled (Pulsar 4's
"draining hashes", PIP-379), so the new owner never overtakes the old one.

Pure: no I/O, no clock. The subscription reads the entries and applies the selection.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from magnetar.broker import formats
from magnetar.core.entries import Entry

C = TypeVar("C")  # a consumer; only its identity matters here


def key_hash(entry: Entry) -> int:
    """The ring position of the entry's key (ordering key, else partition key, else b"")."""
    return zlib.crc32(formats.key_of(entry.format, entry.payload) or b"")


@dataclass(slots=True)
class Selection(Generic[C]):
    deliver: list[tuple[Entry, int]] = field(default_factory=list)  # with their key hashes
    park: list[int] = field(default_factory=list)  # base offsets of new entries that wait
    read_to: int | None = None  # the read position after the new entries looked at


@dataclass(slots=True)
class _Pass(Generic[C]):
    owner_of: Callable[[int], C]
    room: dict[C, int]  # messages each consumer may still take in this pass
    draining: Mapping[int, set[C]]  # key hash → consumers holding unacked entries of it
    held: set[int] = field(default_factory=set)  # key hashes held back in this pass

    def offer(self, entry: Entry, h: int, out: Selection[C]) -> bool:
        owner = self.owner_of(h)
        others = self.draining.get(h, set()) - {owner}  # old owners still holding the key
        if h in self.held or self.room.get(owner, 0) <= 0 or others:
            self.held.add(h)
            return False
        self.room[owner] -= entry.count
        out.deliver.append((entry, h))
        return True


def select(
    replayed: list[Entry],
    fresh: list[Entry],
    *,
    owner_of: Callable[[int], C],
    room: dict[C, int],
    draining: Mapping[int, set[C]],
    look_ahead: int,
    settled: Callable[[Entry], bool],
) -> Selection[C]:
    """Decide one dispatch pass.

    ``replayed``: every waiting entry, oldest first; ``fresh``: new entries from the read
    position on. ``room``: permits per consumer (changed in place). At most ``look_ahead``
    new entries are parked; the pass stops reading there. ``settled`` new entries
    (acknowledged, or already out) are passed over.
    """
    out: Selection[C] = Selection()
    state = _Pass(owner_of, room, draining)
    for entry in replayed:
        state.offer(entry, key_hash(entry), out)
    for entry in fresh:
        if not settled(entry) and not state.offer(entry, key_hash(entry), out):
            if look_ahead <= 0:
                break  # the rest waits at the read position
            out.park.append(entry.base_offset)
            look_ahead -= 1
        out.read_to = entry.next_offset
    return out
