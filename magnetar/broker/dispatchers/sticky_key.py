"""Key_Shared subscriptions: each key goes to one consumer (Pulsar's
PersistentStickyKeyDispatcherMultipleConsumers).

Consumers own points on a consistent-hash ring (``RING_POINTS`` each, placed by a CRC32 of
name, id and point number); an entry goes to the owner of its key's hash (ordering key, else
partition key, else b""). A consumer joining or leaving moves only the keys of the arcs it
takes or gives up. A consumer without permits makes only its own keys wait; a key that
changed owner waits until its old owner settled it (:mod:`magnetar.broker.key_shared` makes
those decisions). Entries whose deliver-at time lies ahead are held by the subscription.
"""

from __future__ import annotations

import bisect
import zlib
from collections import defaultdict
from typing import TYPE_CHECKING, ClassVar

from magnetar.broker import formats, key_shared
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatchers.base import READ_BATCH, InOrderDispatcher, read_budget
from magnetar.core.entries import Entry

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription

RING_POINTS = 64
LOOK_AHEAD = READ_BATCH  # entries parked while their consumer has no permits


class StickyKeyDispatcher(InOrderDispatcher):
    """Same key, same consumer, while membership holds."""

    caps_unacked: ClassVar[bool] = True
    delays_delivery: ClassVar[bool] = True

    def __init__(self, sub: Subscription, sub_type: SubType = SubType.KEY_SHARED) -> None:
        super().__init__(sub, sub_type)
        self._ring: list[tuple[int, Consumer]] = []
        self._key_hashes: dict[int, int] = {}  # base → key hash, of entries out on consumers

    def add_consumer(self, consumer: Consumer) -> None:
        super().add_consumer(consumer)
        self._rebuild_ring()

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)
        self._rebuild_ring()

    def _rebuild_ring(self) -> None:
        ring = []
        for c in self.consumers:
            for i in range(RING_POINTS):
                ring.append((zlib.crc32(f"{c.name}#{c.consumer_id}#{i}".encode()), c))
        self._ring = sorted(ring, key=lambda p: p[0])

    def _ring_owner(self, h: int) -> Consumer:
        i = bisect.bisect_left(self._ring, h, key=lambda p: p[0]) % len(self._ring)
        return self._ring[i][1]

    def pick(self, entry: Entry) -> Consumer | None:
        key = formats.key_of(entry.format, entry.payload) or b""
        owner = self._ring_owner(zlib.crc32(key))
        return owner if owner.ready else None

    def settled(self) -> None:
        self.sub.kick()  # keys that waited on their old owner may go now

    async def dispatch(self) -> None:
        """Passes: waiting entries first, then new ones; a consumer without permits makes
        only its own keys wait (see :mod:`key_shared`), never the others."""
        sub = self.sub
        while not sub.blocked_on_unacked and any(c.ready for c in self.consumers):
            epoch = sub.epoch
            replayed = await sub.read_replay() if sub.replay else []
            fresh: list[Entry] = []
            # New entries only while every waiting one was looked at (their keys hold back).
            if len(sub.replay) < LOOK_AHEAD and sub.read_position < sub.readable_end:
                fresh = await sub.read_new(read_budget(self.consumers))
            if epoch != sub.epoch:
                continue
            if not self._send_by_key(replayed, fresh):
                return

    def _send_by_key(self, replayed: list[Entry], fresh: list[Entry]) -> bool:
        """Deliver what may go now, park what must wait; False when nothing moved."""
        sub = self.sub
        draining: dict[int, set[Consumer]] = defaultdict(set)
        for base, (consumer, _) in sub.pending.items():
            if (h := self._key_hashes.get(base)) is not None:
                draining[h].add(consumer)
        chosen = key_shared.select(
            replayed,
            fresh,
            owner_of=self._ring_owner,
            room={c: c.permits if c.ready else 0 for c in self.consumers},  # paused, capped: 0
            draining=draining,
            look_ahead=LOOK_AHEAD - len(sub.replay),
            settled=lambda e: self._settled_or_pending(e) or sub.hold(e),  # held: passed over
        )
        self._key_hashes.update((e.base_offset, h) for e, h in chosen.deliver)
        sent = sub.send([e for e, _ in chosen.deliver], replay=True)
        for entry, _ in chosen.deliver:  # refused after all (a cap): it waits with the rest
            if not self._settled_or_pending(entry):
                sub.replay.add(entry.base_offset)
        sub.replay.update(chosen.park)
        moved = chosen.read_to is not None and chosen.read_to > sub.read_position
        sub.read_position = max(sub.read_position, chosen.read_to or 0)
        if len(self._key_hashes) > 2 * len(sub.pending) + 1024:  # drop settled ones
            known = self._key_hashes
            self._key_hashes = {b: known[b] for b in sub.pending if b in known}
        return bool(sent or chosen.park or moved)

    def _settled_or_pending(self, entry: Entry) -> bool:
        base, count = entry.base_offset, entry.count
        return base in self.sub.pending or self.sub.cursor.acked_count(base, base + count) >= count
