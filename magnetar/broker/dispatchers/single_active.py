"""Exclusive and Failover subscriptions: one consumer at a time gets everything (Pulsar's
PersistentDispatcherSingleActiveConsumer).

Exclusive takes one consumer; Failover takes several and feeds the active one: the lowest
priority level, then the lowest name. When it leaves, its unacknowledged entries go back to
the replay set and the next active consumer gets them first. Messages go out at once,
whatever deliver-at time they carry, as in Pulsar.

A subscription that reads compacted (``is_read_compacted``) reads the topic's compacted view
(:mod:`magnetar.broker.compaction`) below its horizon and the topic after it.
"""

from __future__ import annotations

from magnetar.broker.compaction import CompactedView
from magnetar.broker.consumer import Consumer, SubType
from magnetar.broker.dispatchers.base import InOrderDispatcher, read_budget
from magnetar.broker.errors import ConsumerBusyError
from magnetar.core.entries import Entry


class SingleActiveDispatcher(InOrderDispatcher):
    """Feeds the active consumer only."""

    def add_consumer(self, consumer: Consumer) -> None:
        if self.sub_type is SubType.EXCLUSIVE and self.consumers:
            raise ConsumerBusyError(
                f"exclusive subscription {self.sub.name!r} already has a consumer; "
                "use Shared, Failover or Key_Shared to attach several"
            )
        super().add_consumer(consumer)

    def active_consumer(self) -> Consumer | None:
        if not self.consumers:
            return None
        if self.sub_type is SubType.FAILOVER:
            return min(self.consumers, key=lambda c: (c.priority, c.name))
        return self.consumers[0]

    def pick(self, entry: Entry) -> Consumer | None:
        active = self.active_consumer()
        return active if active is not None and active.ready else None

    async def _dispatch_new(self, epoch: int) -> bool:
        view = self._compacted_view()
        if view is None:
            return await super()._dispatch_new(epoch)
        entries = await self._read_compacted(view, read_budget(self.consumers))
        if epoch != self.sub.epoch:
            return True
        # Nothing left in the view: the read position is at its horizon, read the topic on.
        return not entries or self.sub.send(entries, replay=False) > 0

    def _compacted_view(self) -> CompactedView | None:
        """The compacted view to read now: reading compacted and below its horizon."""
        sub = self.sub
        if not sub.read_compacted or sub.compaction is None:
            return None
        view = sub.compaction.view
        return view if view is not None and sub.read_position < view.horizon else None

    async def _read_compacted(self, view: CompactedView, budget: int) -> list[Entry]:
        """The next entries of the compacted view; what compaction left out between and
        inside them is acknowledged as passed, as a reader of the view never gets it. At the
        end of the view the read position moves to the horizon."""
        sub = self.sub
        records = await view.read(sub.read_position, budget)
        position = sub.read_position
        for record in records:
            entry = record.entry
            if entry.base_offset > position:
                sub.cursor.ack_range(position, entry.base_offset)
            sub.cursor.ack(entry.base_offset + i for i in record.dropped)
            position = max(position, entry.next_offset)
        if not records:
            sub.cursor.ack_range(position, view.horizon)
            sub.read_position = max(sub.read_position, view.horizon)
        if sub.store is not None:
            sub.store.changed()
        return [r.entry for r in records]
