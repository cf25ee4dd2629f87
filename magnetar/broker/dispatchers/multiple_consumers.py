"""Shared subscriptions: every consumer gets entries, round robin over those with permits
(Pulsar's PersistentDispatcherMultipleConsumers).

An entry goes to the next consumer, after the one served last, that is ready (permits, not
paused, under its unacked cap); a consumer that leaves puts its unacknowledged entries back
in the replay set, and they go to the others first. Entries whose deliver-at time lies
ahead are held by the subscription (:mod:`magnetar.broker.delays`) and let the entries
behind them pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatchers.base import InOrderDispatcher
from magnetar.core.entries import Entry

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription


class MultipleConsumersDispatcher(InOrderDispatcher):
    """Round robin by permits."""

    caps_unacked: ClassVar[bool] = True
    delays_delivery: ClassVar[bool] = True

    def __init__(self, sub: Subscription, sub_type: SubType = SubType.SHARED) -> None:
        super().__init__(sub, sub_type)
        self._rr = 0  # where the next search for a ready consumer starts

    def pick(self, entry: Entry) -> Consumer | None:
        n = len(self.consumers)
        for i in range(n):
            c = self.consumers[(self._rr + i) % n]
            if c.ready:
                self._rr = (self._rr + i + 1) % n
                return c
        return None
