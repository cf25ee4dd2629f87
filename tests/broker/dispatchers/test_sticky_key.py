"""StickyKeyDispatcher (Key_Shared) in process: one key, one consumer; a consumer leaving
moves only its own keys; a consumer without permits holds only its keys; delayed delivery."""

from __future__ import annotations

from magnetar.broker import Consumer, Subscription, SubType
from magnetar.broker.dispatchers import StickyKeyDispatcher
from magnetar.ledger import ManagedLedger
from magnetar.testing.clock import ManualClock
from magnetar.testing.consumers import RecordingSink
from magnetar.testing.memory_ledger import append_pulsar
from tests.broker.dispatchers.conftest import MakeSub, ack, attach

KEYS = [f"key-{i}" for i in range(24)]


async def publish_keys(ledger: ManagedLedger, rounds: int) -> None:
    for r in range(rounds):
        for k in KEYS:
            await append_pulsar(ledger, f"{k}/{r}".encode(), key=k)


def owners(sink: RecordingSink, consumers: list[Consumer]) -> dict[str, set[int]]:
    """Key → the ids of the consumers that were handed a message of it."""
    out: dict[str, set[int]] = {}
    for c in consumers:
        for value in sink.values(c):
            out.setdefault(value.decode().split("/")[0], set()).add(c.consumer_id)
    return out


def settle_all(sub: Subscription) -> None:
    ack(sub, sorted(sub.pending))


async def test_the_same_key_always_goes_to_the_same_consumer(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.KEY_SHARED)
    assert isinstance(sub.dispatcher, StickyKeyDispatcher)
    consumers = [attach(sub, sink, i) for i in (1, 2, 3)]
    await publish_keys(ledger, 3)
    await sub.dispatched()
    seen = owners(sink, consumers)
    assert set(seen) == set(KEYS)
    assert all(len(ids) == 1 for ids in seen.values())
    assert len({next(iter(ids)) for ids in seen.values()}) == 3  # the keys are spread
    for c in consumers:  # and each key's messages arrive in order
        values = [v.decode() for v in sink.values(c)]
        for k in KEYS:
            mine = [v for v in values if v.startswith(k + "/")]
            assert mine == sorted(mine)


async def test_a_leaving_consumer_moves_only_its_own_keys(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.KEY_SHARED)
    consumers = [attach(sub, sink, i) for i in (1, 2, 3)]
    await publish_keys(ledger, 1)
    await sub.dispatched()
    before = {k: next(iter(ids)) for k, ids in owners(sink, consumers).items()}
    settle_all(sub)
    sub.remove_consumer(consumers[1])
    sink.deliveries.clear()
    await publish_keys(ledger, 1)
    await sub.dispatched()
    after = {k: next(iter(ids)) for k, ids in owners(sink, consumers).items()}
    assert set(after) == set(KEYS)
    for k in KEYS:
        if before[k] == 2:
            assert after[k] in (1, 3)
        else:
            assert after[k] == before[k], k


async def test_a_consumer_without_permits_holds_only_its_keys(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink
) -> None:
    sub = make_sub(SubType.KEY_SHARED)
    one = attach(sub, sink, 1)
    two = attach(sub, sink, 2, permits=0)
    await publish_keys(ledger, 2)
    await sub.dispatched()
    got_one = owners(sink, [one])
    assert got_one and sink.values(two) == []
    assert len(sink.values(one)) == 2 * len(got_one)  # every message of one's keys
    sub.flow(two, 1000)
    await sub.dispatched()
    seen = owners(sink, [one, two])
    assert set(seen) == set(KEYS) and all(len(ids) == 1 for ids in seen.values())
    assert len(sink.values(one)) + len(sink.values(two)) == 2 * len(KEYS)


async def test_key_shared_holds_a_delayed_message_until_its_time(
    ledger: ManagedLedger, make_sub: MakeSub, sink: RecordingSink, clock: ManualClock
) -> None:
    sub = make_sub(SubType.KEY_SHARED)
    one = attach(sub, sink, 1)
    await append_pulsar(ledger, b"later", key="k", deliver_at=clock.now_ms() + 1_000)
    await append_pulsar(ledger, b"now", key="other")
    await sub.dispatched()
    assert sink.values(one) == [b"now"]
    clock.advance(1_000)
    sub.release_due()
    await sub.dispatched()
    assert sink.values(one) == [b"now", b"later"]
