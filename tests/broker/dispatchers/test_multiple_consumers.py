"""MultipleConsumersDispatcher (Shared) in process: round robin under permits, redelivery
of a removed consumer's unacked entries, unacked caps, delayed delivery on a ManualClock."""

from __future__ import annotations

from magnetar.broker import SubType
from magnetar.broker.dispatchers import MultipleConsumersDispatcher
from magnetar.broker.subscription import UnackedLimits
from magnetar.ledger import ManagedLedger
from magnetar.testing.clock import ManualClock
from magnetar.testing.consumers import RecordingSink
from magnetar.testing.memory_ledger import append_pulsar
from tests.broker.dispatchers.conftest import MakeSub, ack, attach, publish


async def test_round_robin_over_consumers_with_permits(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.SHARED)
    assert isinstance(sub.dispatcher, MultipleConsumersDispatcher)
    one = attach(sub, sink, 1, permits=2)
    two = attach(sub, sink, 2, permits=2)
    await publish(ledger, 6)
    await sub.dispatched()
    assert sink.offsets(one) == [0, 2] and sink.offsets(two) == [1, 3]
    assert one.permits == 0 and two.permits == 0
    sub.flow(two, 5)  # only two has room: it takes the rest
    await sub.dispatched()
    assert sink.offsets(one) == [0, 2] and sink.offsets(two) == [1, 3, 4, 5]


async def test_a_removed_consumers_unacked_entries_go_to_the_others_first(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.SHARED)
    one = attach(sub, sink, 1, permits=3)
    two = attach(sub, sink, 2, permits=3)
    await publish(ledger, 6)
    await sub.dispatched()
    assert sink.offsets(one) == [0, 2, 4]
    ack(sub, [2])
    sub.remove_consumer(one)
    await publish(ledger, 1)
    sub.flow(two, 3)
    await sub.dispatched()
    assert sink.offsets(two) == [1, 3, 5, 0, 4, 6]  # 0 and 4 again, before the new 6
    assert sub.unacked == 6 and one.unacked == 0


async def test_redelivery_asked_by_a_consumer_counts(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.SHARED)
    one = attach(sub, sink, 1)
    await publish(ledger, 3)
    await sub.dispatched()
    sub.redeliver(one, [1])  # a negative ack
    await sub.dispatched()
    assert sink.offsets(one) == [0, 1, 2, 1]
    assert [d.redelivery_count for d in sink.deliveries[1]] == [0, 0, 0, 1]


async def test_a_consumer_at_its_unacked_cap_waits_until_acks_bring_it_to_half(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.SHARED, UnackedLimits(per_consumer=4, per_subscription=0))
    one = attach(sub, sink, 1)
    await publish(ledger, 8)
    await sub.dispatched()
    assert sink.offsets(one) == [0, 1, 2, 3] and one.blocked_on_unacked
    ack(sub, [0])
    await sub.dispatched()
    assert sink.offsets(one) == [0, 1, 2, 3]  # 3 unacked: above half of 4
    ack(sub, [1])
    await sub.dispatched()
    assert sink.offsets(one) == [0, 1, 2, 3, 4, 5]


async def test_a_delayed_message_waits_for_the_clock_and_lets_others_pass(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink, clock: ManualClock
) -> None:
    sub = make_sub(SubType.SHARED)
    one = attach(sub, sink, 1)
    await append_pulsar(ledger, b"later", deliver_at=clock.now_ms() + 5_000)
    await append_pulsar(ledger, b"now")
    await sub.dispatched()
    assert sink.values(one) == [b"now"]
    assert 0 in sub.delays
    clock.advance(4_999)
    sub.release_due()  # what the timer calls: nothing is due yet
    await sub.dispatched()
    assert sink.values(one) == [b"now"]
    clock.advance(1)
    sub.release_due()
    await sub.dispatched()
    assert sink.values(one) == [b"now", b"later"]
    assert len(sub.delays) == 0


async def test_turning_delays_off_releases_what_is_held(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink, clock: ManualClock
) -> None:
    sub = make_sub(SubType.SHARED)
    one = attach(sub, sink, 1)
    await append_pulsar(ledger, b"later", deliver_at=clock.now_ms() + 60_000)
    await sub.dispatched()
    assert sink.values(one) == []
    sub.delayed.active = False
    sub.release_delayed()
    await sub.dispatched()
    assert sink.values(one) == [b"later"]
