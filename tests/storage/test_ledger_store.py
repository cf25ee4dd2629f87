"""The store of a bookie: ledgers as engine partitions of records with their entry ids,
indexed at open, fenced durably (what a storage node serves and LocalSegments writes
through). On a real engine in ``tmp_path``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.core.entries import Entry
from magnetar.storage import StorageEngine
from magnetar.storage.errors import FencedError
from magnetar.storage.ledger_records import RECORD, Record, pack_entry
from magnetar.storage.ledger_store import LedgerStore, StoredLedger
from tests.storage.conftest import OpenEngine, reopen
from tests.storage.test_corruption import flip


def record(eid: int, base: int | None = None) -> Record:
    return Record(eid, eid * 10 if base is None else base, 10, 1000 + eid, -1, 0, b"e%d" % eid)


async def _store(engine: StorageEngine, tmp_path: Path) -> LedgerStore:
    return await LedgerStore.open(engine, tmp_path / "fenced.json")


async def _payloads(store: LedgerStore, ledger_id: int, first: int, last: int) -> list[bytes]:
    got = await store.read(ledger_id, first, last, 1 << 20)
    assert got is not None and got.damaged_at is None
    return [r.payload for r in got.records]


async def test_entries_added_in_any_order_read_in_id_order_and_survive_a_reopen(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    engine = await open_engine()
    store = await _store(engine, tmp_path)
    for eid in (2, 0, 3, 1):
        await store.add(7, record(eid))
    await store.add(7, record(2))  # a resend: held already, stored once
    assert await _payloads(store, 7, 0, 3) == [b"e0", b"e1", b"e2", b"e3"]
    store = await _store(await reopen(engine, open_engine), tmp_path)
    ledger = store.ledger(7)
    assert ledger is not None and ledger.ids == [0, 1, 2, 3] and len(ledger.rows) == 4
    assert await _payloads(store, 7, 1, 2) == [b"e1", b"e2"]
    assert await store.check(7) == {"entries": 4, "damaged": [], "problem": ""}
    assert await store.read(7, 9, 9, 1 << 20) is None  # not held
    assert await store.read(8, 0, 0, 1 << 20) is None and await store.check(8) is None


async def test_a_fence_refuses_later_adds_but_a_recoverers_and_survives_a_reopen(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    engine = await open_engine()
    store = await _store(engine, tmp_path)
    await store.add(3, record(0), lac=-1)
    await store.add(3, record(1), lac=0)
    fenced = await store.fence(3)
    assert fenced is not None and (fenced.lac, fenced.last) == (0, 1)
    assert store.last_confirmed(3) == (0, 1) and store.last_confirmed(99) is None
    with pytest.raises(FencedError, match="ledger 3 is fenced"):
        await store.add(3, record(2))
    await store.add(3, record(2), recovery=True)  # a recoverer writes the tail back
    await store.add(4, record(0))  # other ledgers are not fenced
    store = await _store(await reopen(engine, open_engine), tmp_path)
    assert store.is_fenced(3) and not store.is_fenced(4)
    with pytest.raises(FencedError):
        await store.add(3, record(3))
    await store.delete(3)  # entries and fence go
    assert store.ledger(3) is None and not store.is_fenced(3)
    assert not store.engine.has_partition("L3")
    store = await _store(await reopen(store.engine, open_engine), tmp_path)
    assert not store.is_fenced(3) and store.ledger(3) is None and store.ledger(4) is not None


async def test_a_fence_waits_for_the_adds_accepted_before_it(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    store = await _store(await open_engine(), tmp_path)
    await store.create(5)
    adds = [asyncio.ensure_future(store.add(5, record(eid))) for eid in range(3)]
    ledger = store.ledger(5)
    assert ledger is not None
    while len(ledger.in_flight) + len(ledger.rows) < 3:  # all three accepted
        await asyncio.sleep(0)
    fenced = await store.fence(5)
    assert fenced is not None and fenced.ids == [0, 1, 2] and not ledger.in_flight
    await asyncio.gather(*adds)


async def test_adds_started_in_a_row_keep_their_order_and_a_cancelled_one_is_indexed(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    store = await _store(await open_engine(), tmp_path)
    await store.create(6)
    told: list[tuple[int, BaseException | None]] = []
    for eid in range(3):
        store.start(6, record(eid), lambda error, eid=eid: told.append((eid, error)))
    gone = asyncio.ensure_future(store.add(6, record(3)))  # its caller goes away
    await asyncio.sleep(0)
    gone.cancel()
    await store.add(6, record(4))
    assert told == [(0, None), (1, None), (2, None)]
    ledger = store.ledger(6)
    assert ledger is not None and ledger.ids == [0, 1, 2, 3, 4]
    assert [ledger.rows[eid][0] for eid in range(5)] == [0, 1, 2, 3, 4]  # engine offsets
    await store.fence(6)
    store.start(6, record(5), lambda error: told.append((5, error)))  # refused at once
    assert isinstance(told[-1][1], FencedError)


def test_a_record_packed_from_an_entry_has_the_on_disk_layout() -> None:
    entry = Entry(40, 3, 1_700_000_000_000, -1, 2, b"batch", segment_id=9)
    packed = pack_entry(7, entry)
    assert packed == Record.of(7, entry).pack()
    assert packed[: RECORD.size] == bytes.fromhex(
        "00000000000000070000000000000028000000030000018bcfe56800ffffffffffffffff02"
    )
    assert Record.unpack(packed).entry(9) == entry


def test_the_prefix_of_entry_ids_ends_before_the_first_gap() -> None:
    ledger = StoredLedger()
    assert ledger.last_of_prefix == -1
    ledger.add(1, 0, 0, 1, 0)
    assert (ledger.last_of_prefix, ledger.last) == (-1, 1)
    for eid in (0, 2, 4):
        ledger.add(eid, eid, eid, 1, 0)
    assert (ledger.last_of_prefix, ledger.last) == (2, 4)
    ledger.add(3, 9, 3, 1, 0)
    assert ledger.last_of_prefix == 4


@pytest.mark.parametrize("cache_bytes", [1, 1 << 20])  # 1: nothing stays cached
async def test_reads_decode_records_from_the_files_or_the_cache_across_files_and_budgets(
    open_engine: OpenEngine, tmp_path: Path, cache_bytes: int
) -> None:
    """A read makes the ledger's entries from the engine's files (each record decoded once,
    on the reader thread) or from its cache: across the engine's files, stopping at a gap
    in the ids stored one after another, and at the byte budget (at least one entry)."""
    engine = await open_engine(segment_max_bytes=400, tail_cache_bytes=cache_bytes)
    store = await _store(engine, tmp_path)
    for eid in [*range(20), 25, 20, 21, 22, 23, 24]:  # 25 lands before 20..24 on disk
        await store.add(7, record(eid))
    assert len(engine.segments("L7")) > 3  # the reads below cross files
    got = await store.read_entries(7, 0, 25, 1 << 20)
    assert got is not None and got[1] is None
    assert [(e.base_offset, e.count, e.segment_id) for e in got[0]] == [
        (eid * 10, 10, 7) for eid in range(26)
    ]
    assert [e.payload for e in got[0]] == [b"e%d" % eid for eid in range(26)]
    small = await store.read_entries(7, 3, 25, 4)  # 2 bytes an entry: taken while under 4
    assert small is not None and [e.payload for e in small[0]] == [b"e3", b"e4"]
    one = await store.read_entries(7, 18, 25, 1)
    assert one is not None and [e.payload for e in one[0]] == [b"e18"]


async def test_the_index_rebuilt_at_open_equals_the_one_built_by_the_adds_and_skips_damage(
    open_engine: OpenEngine, tmp_path: Path
) -> None:
    """At open the store reads only the records' headers back (no payload copied): the same
    rows as the adds indexed, across the engine's files; a damaged file's entries from the
    damage on are left out and the ledger marked damaged, the files after it still indexed."""
    engine = await open_engine(segment_max_bytes=400)
    store = await _store(engine, tmp_path)
    for eid in range(40):
        await store.add(7, record(eid))
    held = store.ledger(7)
    assert held is not None
    added = dict(held.rows)
    engine = await reopen(engine, open_engine, segment_max_bytes=400)
    store = await _store(engine, tmp_path)
    again = store.ledger(7)
    assert again is not None and again.rows == added and again.ids == list(range(40))
    assert not again.damaged and not store.skipped_at_load(7)

    files = sorted(engine.ledger_dir.glob("*/*.log"))
    assert len(files) > 3
    await engine.aclose()
    await engine.meta.aclose()
    flip(files[1], files[1].stat().st_size - 1)  # the payload of the second file's last entry
    store = await _store(await open_engine(segment_max_bytes=400), tmp_path)
    damaged = store.ledger(7)
    assert damaged is not None and "checksum" in damaged.damaged
    assert store.skipped_at_load(7)
    missing = sorted(set(range(40)) - set(damaged.rows))
    assert missing == list(range(missing[0], missing[-1] + 1)) and 39 not in missing
    assert all(damaged.rows[eid] == added[eid] for eid in damaged.rows)
