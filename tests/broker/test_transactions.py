"""The partition's transaction index (magnetar.broker.transactions) in process: the last
stable offset, what is hidden, dispatch of every subscription type stopping at the LSO and
passing over markers and aborted batches, the record surviving a reload and healed from the
log. A real Subscription on an in-memory ledger; Kafka batches as the coordinator and a
transactional producer write them."""

from __future__ import annotations

import pytest

from magnetar.broker import Subscription, SubType
from magnetar.broker.transactions import TransactionIndex
from magnetar.core.formats import KAFKA
from magnetar.ledger import ManagedLedger
from magnetar.meta.memory import MemoryMetadataStore
from magnetar.protocols.kafka import records
from magnetar.protocols.kafka.entry_format import marker_batch
from magnetar.testing.consumers import RecordingSink, consumer
from magnetar.testing.memory_ledger import append_pulsar, memory_ledger

PATH = "public/default/txn"


async def data(ledger: ManagedLedger, index: TransactionIndex, pid: int | None) -> int:
    """Append a one-record batch, transactional for producer ``pid``; its offset."""
    if pid is None:
        batch = records.encode([records.Record(b"k", b"v", 1)])
    else:
        await index.opening(pid, ledger.end_offset)
        batch = records.encode(
            [records.Record(b"k", b"v", 1)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            attributes=records.TRANSACTIONAL,
        )
    return (await ledger.append(batch, fmt=KAFKA)).base_offset


async def end(ledger: ManagedLedger, index: TransactionIndex, pid: int, commit: bool) -> int:
    entry = await ledger.append(marker_batch(pid, 0, commit, 1), fmt=KAFKA)
    index.ended(pid, commit, entry.base_offset)
    return entry.base_offset


@pytest.fixture
async def ledger() -> ManagedLedger:
    return await memory_ledger(entries_per_segment=10)


@pytest.fixture
def meta() -> MemoryMetadataStore:
    return MemoryMetadataStore()


async def test_last_stable_offset_and_what_is_hidden(
    ledger: ManagedLedger, meta: MemoryMetadataStore
) -> None:
    index = TransactionIndex(meta, PATH, ledger)
    await index.load()
    assert not index.used and index.last_stable() == 0
    committed = await data(ledger, index, 1)  # 0
    aborted = await data(ledger, index, 2)  # 1
    assert index.last_stable() == committed  # the oldest open transaction holds readers
    commit = await end(ledger, index, 1, commit=True)  # 2
    assert index.last_stable() == aborted
    abort = await end(ledger, index, 2, commit=False)  # 3
    assert index.last_stable() == ledger.end_offset
    entries = await ledger.read(0, max_entries=10)
    assert [e.base_offset for e in entries if index.hides(e)] == [aborted, commit, abort]
    assert [(a.producer_id, a.first, a.last) for a in index.aborted_in(0, 10)] == [(2, 1, 3)]
    assert (await index.last_visible()).base_offset == committed  # type: ignore[union-attr]


async def test_the_record_survives_a_reload_and_is_healed_from_the_log(
    ledger: ManagedLedger, meta: MemoryMetadataStore
) -> None:
    index = TransactionIndex(meta, PATH, ledger)
    await data(ledger, index, 1)
    await data(ledger, index, 2)
    await end(ledger, index, 2, commit=False)
    await index.flush()
    # a crash after the marker of producer 1 was stored, before the index recorded it
    await ledger.append(marker_batch(1, 0, False, 1), fmt=KAFKA)
    again = TransactionIndex(meta, PATH, ledger)
    await again.load()
    assert again.used and again.open == {}
    assert [(a.producer_id, a.first, a.last) for a in again.aborted] == [(2, 1, 2), (1, 0, 3)]
    assert again.last_stable() == ledger.end_offset


async def test_a_transaction_opened_after_the_record_is_found_by_replaying_the_log(
    ledger: ManagedLedger, meta: MemoryMetadataStore
) -> None:
    """Only a partition's first transaction writes the record before its batch; a later one
    writes nothing when it opens, and a crash then still finds it open (the log after the
    record's scanFrom is replayed)."""
    index = TransactionIndex(meta, PATH, ledger)
    await data(ledger, index, 1)
    await end(ledger, index, 1, commit=True)
    await index.flush()
    before = await meta.get(index.node)
    opened = await data(ledger, index, 2)
    plain = await data(ledger, index, None)  # a message after it waits behind it
    after = await meta.get(index.node)
    assert before is not None and after is not None
    assert after.stat.version == before.stat.version  # opening wrote nothing
    again = TransactionIndex(meta, PATH, ledger)
    await again.load()
    assert again.open == {2: opened} and again.last_stable() == opened < plain
    await end(ledger, again, 2, commit=False)
    await again.flush()
    third = TransactionIndex(meta, PATH, ledger)
    await third.load()
    assert third.open == {} and [(a.producer_id, a.first) for a in third.aborted] == [(2, opened)]


@pytest.mark.parametrize("sub_type", [SubType.EXCLUSIVE, SubType.SHARED, SubType.KEY_SHARED])
async def test_dispatch_stops_at_the_lso_and_passes_hidden_entries_over(
    ledger: ManagedLedger, meta: MemoryMetadataStore, sub_type: SubType
) -> None:
    index = TransactionIndex(meta, PATH, ledger)
    sub = Subscription("s", sub_type, ledger, None, txns=index)
    sink = RecordingSink()
    c = consumer(sink, 1)
    sub.add_consumer(c, sub_type)
    sub.flow(c, 1000)
    try:
        plain = (await append_pulsar(ledger, b"pulsar")).base_offset  # 0
        kept = await data(ledger, index, 1)  # 1
        await end(ledger, index, 1, commit=True)  # 2
        await data(ledger, index, 2)  # 3: aborted below
        await end(ledger, index, 2, commit=False)  # 4
        pending = await data(ledger, index, 3)  # 5: open
        behind = await data(ledger, index, None)  # 6: not transactional, behind the open one
        await sub.dispatched()
        assert sink.offsets(c) == [plain, kept]
        assert [o for o in range(5) if sub.cursor.is_acked(o)] == [2, 3, 4]  # passed over
        await end(ledger, index, 3, commit=True)  # 7: wakes the subscription up
        await sub.dispatched()
        assert sink.offsets(c) == [plain, kept, pending, behind]
        assert all(sub.cursor.is_acked(o) for o in (2, 3, 4, 7))
    finally:
        await sub.aclose()
