"""What a subscription asks of its dispatcher, and the in-order dispatch loop that the
single-active and multiple-consumers dispatchers share.

The :class:`~magnetar.broker.subscription.Subscription` keeps what every type has in common:
the cursor and acknowledgements, the entries out on consumers and the replay set, the
unacked caps, delayed-delivery holds, seeks and the coalesced dispatch task. A dispatcher
owns the consumers and decides who gets which entry, and when (Pulsar's dispatcher per
subscription type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from magnetar.broker.consumer import Consumer, SubType
from magnetar.core.entries import Entry

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription

READ_BATCH = 500  # entries one read brings at most


class Dispatcher(Protocol):
    """One subscription type's strategy. ``consumers`` is the dispatcher's own list, in the
    order they joined; a subscription changes its dispatcher only while it has none."""

    sub_type: SubType
    consumers: list[Consumer]
    caps_unacked: ClassVar[bool]  # Pulsar caps unacked messages of this type (UnackedLimits)
    delays_delivery: ClassVar[bool]  # entries wait for their deliver-at time

    def add_consumer(self, consumer: Consumer) -> None:
        """Take ``consumer`` on; raises ConsumerBusyError when the type allows no more."""
        ...

    def remove_consumer(self, consumer: Consumer) -> None:
        """Forget ``consumer`` (its entries are already back in the replay set)."""
        ...

    def active_consumer(self) -> Consumer | None:
        """The consumer Pulsar reports as active (the one fed, for Exclusive/Failover)."""
        ...

    def pick(self, entry: Entry) -> Consumer | None:
        """Who gets ``entry`` now; None when its consumer cannot take it now."""
        ...

    def settled(self) -> None:
        """Entries out on consumers were settled (acknowledged)."""
        ...

    async def dispatch(self) -> None:
        """Deliver what may go now; return when nothing more can (the subscription runs
        this again after a flow, an ack, an append or a redelivery)."""
        ...


def read_budget(consumers: list[Consumer]) -> int:
    """How many entries one read brings: the permits there are, within 1 .. READ_BATCH."""
    return max(1, min(READ_BATCH, sum(max(c.permits, 0) for c in consumers)))


class InOrderDispatcher:
    """Dispatch in offset order: entries waiting for redelivery first, then new entries from
    the read position. Subclasses choose the consumer of each entry (:meth:`pick`)."""

    caps_unacked: ClassVar[bool] = False
    delays_delivery: ClassVar[bool] = False

    def __init__(self, sub: Subscription, sub_type: SubType) -> None:
        self.sub = sub
        self.sub_type = sub_type
        self.consumers: list[Consumer] = []

    def add_consumer(self, consumer: Consumer) -> None:
        if self.caps_unacked:
            consumer.max_unacked = self.sub.limits.per_consumer
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)

    def active_consumer(self) -> Consumer | None:
        return self.consumers[0] if self.consumers else None

    def pick(self, entry: Entry) -> Consumer | None:
        raise NotImplementedError

    def settled(self) -> None:
        """Nothing waits on acks here beyond the unacked caps (the subscription's)."""

    async def dispatch(self) -> None:
        sub = self.sub
        while not sub.blocked_on_unacked and any(c.ready for c in self.consumers):
            epoch = sub.epoch
            if sub.replay:
                entries = await sub.read_replay()
                if epoch != sub.epoch or not entries:
                    continue
                if not sub.send(entries, replay=True):
                    return
            elif not await self._dispatch_new(epoch):
                return

    async def _dispatch_new(self, epoch: int) -> bool:
        """Read and send new entries; False when nothing more can go now."""
        sub = self.sub
        if sub.read_position >= sub.readable_end:
            return False
        entries = await sub.read_new(read_budget(self.consumers))
        if epoch != sub.epoch:
            return True  # a seek meanwhile: start again from the new position
        return bool(entries) and sub.send(entries, replay=False) > 0
