"""SingleActiveDispatcher (Exclusive, Failover) in process: who is active, failover on
removal, no delay, damaged entries, compacted reads."""

from __future__ import annotations

import pytest

from magnetar.broker import Subscription, SubType
from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.dispatchers import SingleActiveDispatcher
from magnetar.broker.errors import ConsumerBusyError
from magnetar.ledger import LedgerFactory, ManagedLedger
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.testing.clock import ManualClock
from magnetar.testing.consumers import RecordingSink
from magnetar.testing.memory_ledger import MemoryStorage, append_pulsar
from tests.broker.dispatchers.conftest import MakeSub, ack, attach, publish


async def test_exclusive_feeds_its_one_consumer_and_refuses_a_second(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.EXCLUSIVE)
    assert isinstance(sub.dispatcher, SingleActiveDispatcher)
    c = attach(sub, sink, 1)
    offsets = await publish(ledger, 25)  # three segments: ids move to new ledgers
    await sub.dispatched()
    assert sink.offsets(c) == offsets
    ids = [d.message_id for d in sink.deliveries[1]]
    assert [(i.ledger_id, i.entry_id) for i in ids[9:11]] == [(1, 9), (2, 0)]
    with pytest.raises(ConsumerBusyError, match="already has a consumer"):
        attach(sub, sink, 2)
    assert sub.consumers == [c]


async def test_failover_feeds_the_lowest_priority_then_name(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.FAILOVER)
    b = attach(sub, sink, 1, name="b")
    attach(sub, sink, 2, name="a", priority=1)
    c = attach(sub, sink, 3, name="c")
    assert sub.active_consumer() is b
    await publish(ledger, 5)
    await sub.dispatched()
    assert sink.offsets(b) == [0, 1, 2, 3, 4]
    assert sink.offsets(c) == [] and sink.deliveries.get(2) is None


async def test_failover_moves_unacked_entries_to_the_next_active_consumer(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.FAILOVER)
    first = attach(sub, sink, 1, name="a")
    second = attach(sub, sink, 2, name="b")
    await publish(ledger, 4)
    await sub.dispatched()
    ack(sub, [0, 1])
    sub.remove_consumer(first)
    await publish(ledger, 2)
    await sub.dispatched()
    assert sub.active_consumer() is second
    assert sink.offsets(second) == [2, 3, 4, 5]  # its unacked first, then new ones
    assert sub.backlog == 4


async def test_an_active_consumer_without_permits_holds_everything(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.FAILOVER)
    a = attach(sub, sink, 1, name="a", permits=2)
    b = attach(sub, sink, 2, name="b")
    await publish(ledger, 4)
    await sub.dispatched()
    assert sink.offsets(a) == [0, 1] and sink.offsets(b) == []
    sub.flow(a, 5)
    await sub.dispatched()
    assert sink.offsets(a) == [0, 1, 2, 3]


async def test_exclusive_delivers_a_delayed_message_at_once(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink, clock: ManualClock
) -> None:
    sub = make_sub(SubType.EXCLUSIVE)
    c = attach(sub, sink, 1)
    await append_pulsar(ledger, b"later", deliver_at=clock.now_ms() + 60_000)
    await sub.dispatched()
    assert sink.values(c) == [b"later"]
    assert len(sub.delays) == 0


async def test_a_damaged_entry_waits_then_is_skipped_when_allowed(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    assert isinstance(ledger.storage, MemoryStorage)
    sub = make_sub(SubType.EXCLUSIVE)
    await publish(ledger, 5)
    ledger.storage.damage(ledger.name, 2)
    c = attach(sub, sink, 1)
    await sub.dispatched()
    assert sink.offsets(c) == [0, 1]
    assert sub.damage.blocked_at == 2
    ledger.auto_skip_non_recoverable_data = True
    await publish(ledger, 1)  # an append kicks dispatch
    await sub.dispatched()
    assert sink.offsets(c) == [0, 1, 3, 4, 5]
    assert sub.damage.skipped == 1 and sub.damage.blocked_at is None


async def test_reading_compacted_gets_the_view_then_the_topic(
    ledger: ManagedLedger, clock: ManualClock, sink: RecordingSink
) -> None:
    compaction = TopicCompaction(
        "public/default/memory", ledger, LedgerFactory(ledger.storage), MemoryMetadataStore()
    )
    for value, key in ((b"a1", "a"), (b"b1", "b"), (b"a2", "a")):
        await append_pulsar(ledger, value, key=key)
    await compaction.compact()  # horizon 3: keeps b1 (1) and a2 (2)
    await append_pulsar(ledger, b"a3", key="a")
    sub = Subscription("s", SubType.FAILOVER, ledger, None, clock=clock, compaction=compaction)
    try:
        c = attach(sub, sink, 1)
        sub.read_compacted = True
        await sub.dispatched()
        assert sink.values(c) == [b"b1", b"a2", b"a3"]
        assert [d.message_id.entry_id for d in sink.deliveries[1]] == [1, 2, 3]  # original ids
        assert sub.cursor.is_acked(0)  # left out by compaction: passed
    finally:
        await sub.aclose()
