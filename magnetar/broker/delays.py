"""Delayed delivery (Pulsar's ``deliver_at`` / ``deliver_after``): messages a Shared or
Key_Shared subscription holds back until their time.

The index is not persisted: a held message is unacknowledged, so the subscription's
mark-delete position stays below it and, after a restart, dispatch reads it again from
there and holds it again (Pulsar's InMemoryDelayedDeliveryTracker is rebuilt the same way).
Exclusive and Failover subscriptions deliver at once, as Pulsar does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

DEFAULT_TICK_MS = 1000  # Pulsar's delayedDeliveryTickTimeMillis


@dataclass(slots=True)
class DelayedDeliveryPolicy:
    """Pulsar's DelayedDeliveryPolicies of a topic's namespace; one object shared by the
    topic's subscriptions, changed in place when the policy changes.

    ``active`` False: messages go out at once, whatever time they carry. ``tick_ms`` is
    Pulsar's timer granularity; Magnetar's timer fires at each message's own time (never
    earlier), so it is kept and reported only.
    """

    active: bool = True
    tick_ms: int = DEFAULT_TICK_MS


class DelayIndex:
    """Entries held until a time: base offset → deliver-at time (ms since the epoch)."""

    def __init__(self) -> None:
        self._at: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (time, base); stale pairs skipped on pop

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, base: int) -> bool:
        return base in self._at

    def hold(self, base: int, at: int) -> None:
        if self._at.get(base) != at:
            self._at[base] = at
            heapq.heappush(self._heap, (at, base))

    def next_time(self) -> int | None:
        """When the earliest held entry is due, or None when nothing is held."""
        while self._heap and self._at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: int) -> list[int]:
        """Base offsets of the entries due at ``now`` (no longer held), oldest time first."""
        due = []
        while (at := self.next_time()) is not None and at <= now:
            _, base = heapq.heappop(self._heap)
            del self._at[base]
            due.append(base)
        return due

    def pop_all(self) -> list[int]:
        """Every held entry (the policy was turned off, or the type no longer delays)."""
        bases = sorted(self._at)
        self.clear()
        return bases

    def clear(self) -> None:
        self._at.clear()
        self._heap.clear()
