"""In-process dispatcher tests (aiokafka's tests/test_fetcher.py style): a real Subscription
on an in-memory managed ledger, a ManualClock, and consumers whose sink records what they
were handed. No server, no sockets, no sleeps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from magnetar.broker import Consumer, Subscription, SubType
from magnetar.broker.subscription import UnackedLimits
from magnetar.ledger import ManagedLedger
from magnetar.testing.clock import ManualClock
from magnetar.testing.consumers import RecordingSink, consumer
from magnetar.testing.memory_ledger import append_pulsar, memory_ledger

MakeSub = Callable[..., Subscription]
DEFAULT_LIMITS = UnackedLimits()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def ledger(clock: ManualClock) -> ManagedLedger:
    return await memory_ledger(clock=clock, entries_per_segment=10)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
async def make_sub(ledger: ManagedLedger, clock: ManualClock) -> AsyncIterator[MakeSub]:
    """Subscriptions (not durable: no metadata store) closed after the test."""
    made: list[Subscription] = []

    def make(sub_type: SubType, limits: UnackedLimits = DEFAULT_LIMITS) -> Subscription:
        sub = Subscription("s", sub_type, ledger, None, limits=limits, clock=clock)
        made.append(sub)
        return sub

    yield make
    for sub in made:
        await sub.aclose()


async def publish(ledger: ManagedLedger, n: int, *, key: str | None = None) -> list[int]:
    """Append ``n`` one-message entries (values m<offset>); their offsets."""
    return [
        (await append_pulsar(ledger, f"m{ledger.end_offset}".encode(), key=key)).base_offset
        for _ in range(n)
    ]


def attach(
    sub: Subscription,
    sink: RecordingSink,
    consumer_id: int,
    *,
    permits: int = 1000,
    name: str = "",
    priority: int = 0,
) -> Consumer:
    c = consumer(sink, consumer_id, name, priority=priority)
    sub.add_consumer(c, sub.type)
    sub.flow(c, permits)
    return c


def ack(sub: Subscription, offsets: list[int]) -> None:
    sub.ack({o: [o] for o in offsets})
