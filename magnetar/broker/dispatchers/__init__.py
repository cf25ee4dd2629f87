"""One dispatcher per subscription type, as in Pulsar: who gets which entry, and when.

- :class:`SingleActiveDispatcher`: Exclusive and Failover (the active consumer only);
- :class:`MultipleConsumersDispatcher`: Shared (round robin by permits);
- :class:`StickyKeyDispatcher`: Key_Shared (a key always to the same consumer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.consumer import SubType
from magnetar.broker.dispatchers.base import READ_BATCH, Dispatcher
from magnetar.broker.dispatchers.multiple_consumers import MultipleConsumersDispatcher
from magnetar.broker.dispatchers.single_active import SingleActiveDispatcher
from magnetar.broker.dispatchers.sticky_key import StickyKeyDispatcher

if TYPE_CHECKING:
    from magnetar.broker.subscription import Subscription

__all__ = [
    "READ_BATCH",
    "Dispatcher",
    "MultipleConsumersDispatcher",
    "SingleActiveDispatcher",
    "StickyKeyDispatcher",
    "dispatcher_for",
]


def dispatcher_for(sub: Subscription, sub_type: SubType) -> Dispatcher:
    """A new, empty dispatcher of ``sub_type`` for ``sub``."""
    if sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        return SingleActiveDispatcher(sub, sub_type)
    if sub_type is SubType.SHARED:
        return MultipleConsumersDispatcher(sub, sub_type)
    return StickyKeyDispatcher(sub, sub_type)
