"""Property tests for the pure parts: entry/journal codecs, sparse indexes, tail cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.storage.index import IndexBuilder, OffsetIndex, TimeIndex
from magnetar.storage.records import (
    Entry,
    RecordError,
    decode_entry,
    decode_journal_record,
    encode_header,
    journal_prefix,
)
from magnetar.storage.tail_cache import CacheBudget

i64 = st.integers(min_value=0, max_value=(1 << 62))
entries = st.tuples(
    i64,
    st.integers(min_value=1, max_value=1 << 20),
    st.integers(min_value=-(1 << 62), max_value=1 << 62),
    st.integers(min_value=-(1 << 62), max_value=1 << 62),
    st.integers(min_value=0, max_value=255),
    st.binary(max_size=512),
)


@given(entries)
def test_entry_round_trip(fields: tuple[int, int, int, int, int, bytes]) -> None:
    base, count, pt, et, fmt, payload = fields
    data = encode_header(base, count, pt, et, fmt, payload) + payload
    entry, end = decode_entry(data, 0)
    assert end == len(data)
    assert (entry.base_offset, entry.count, entry.publish_time, entry.event_time) == (
        base,
        count,
        pt,
        et,
    )
    assert (entry.format, entry.payload) == (fmt, payload)


@given(entries, st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_journal_record_round_trip(fields: tuple[int, int, int, int, int, bytes], pid: int) -> None:
    base, count, pt, et, fmt, payload = fields
    header = encode_header(base, count, pt, et, fmt, payload)
    data = b"junk" + journal_prefix(pid, header) + header + payload
    got_pid, entry, end = decode_journal_record(data, 4)
    assert (got_pid, entry.base_offset, entry.payload, end) == (pid, base, payload, len(data))


@given(entries, st.data())
def test_any_flipped_byte_or_cut_is_detected(
    fields: tuple[int, int, int, int, int, bytes], data: st.DataObject
) -> None:
    base, count, pt, et, fmt, payload = fields
    record = bytearray(encode_header(base, count, pt, et, fmt, payload) + payload)
    cut = data.draw(st.integers(min_value=0, max_value=len(record) - 1))
    with pytest.raises(RecordError) as cut_error:
        decode_entry(bytes(record[:cut]), 0)
    assert cut_error.value.torn
    i = data.draw(st.integers(min_value=0, max_value=len(record) - 1))
    record[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(RecordError):
        decode_entry(bytes(record), 0)


@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 400), st.integers(0, 1000)), min_size=1),
    st.integers(16, 2000),
    st.integers(0, 3000),
)
def test_sparse_indexes_land_before_the_target(
    layout: list[tuple[int, int, int]], interval: int, probe: int
) -> None:
    builder = IndexBuilder(interval)
    rows, offset, pos = [], 0, 0
    for count, size, ts in layout:
        builder.on_entry(offset, ts, pos)
        rows.append((offset, count, pos, ts))
        offset, pos = offset + count, pos + size
    # Offset index: the position returned is that of an entry at or before the target's.
    target_offset = probe % offset
    holder = max(r for r in rows if r[0] <= target_offset)
    assert builder.offsets.lookup(target_offset) <= holder[2]
    # Time index: scanning from the returned position finds the first entry with ts >= probe.
    start = builder.times.lookup(probe)
    first = next((r for r in rows if r[3] >= probe), None)
    if first is not None:
        assert start <= first[2]
    # Both survive serialisation.
    assert OffsetIndex.from_bytes(builder.offsets.to_bytes()).offsets == builder.offsets.offsets
    assert TimeIndex.from_bytes(builder.times.to_bytes()).positions == builder.times.positions


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 200)), max_size=300))
def test_one_budget_bounds_every_partition_and_evicts_oldest_first(
    appends: list[tuple[int, int]],
) -> None:
    """Four partitions' caches share 2,000 bytes: the node never holds more (beyond the
    entry being added), what goes is always the node-wide oldest, and evicted entries are
    released at once (no reference kept)."""
    budget = CacheBudget(2000)
    caches = [budget.cache() for _ in range(4)]
    offsets = [0] * 4
    order: list[tuple[int, int]] = []  # (partition, base offset) in insertion order
    for partition, size in appends:
        entry = Entry(offsets[partition], 1, 0, -1, 0, b"p" * size)
        caches[partition].add(entry)
        order.append((partition, offsets[partition]))
        offsets[partition] += 1
        assert budget.bytes <= 2000 + entry.stored_size
        assert budget.bytes == sum(c._bytes for c in caches)
    held = {(p, e.base_offset) for p, c in enumerate(caches) for e in c._entries if e}
    assert held == set(order[len(order) - len(held) :])  # a suffix: the newest ones
    assert budget.entries == len(held)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=60), st.integers(50, 2000), st.data())
def test_tail_cache_serves_contiguous_recent_entries(
    counts: list[int], budget: int, data: st.DataObject
) -> None:
    cache = CacheBudget(budget).cache()
    offset, added = 0, []
    for c in counts:
        entry = Entry(offset, c, 0, -1, 0, b"p" * 20)
        cache.add(entry)
        added.append(entry)
        offset += c
    probe = data.draw(st.integers(0, offset + 2))
    got = cache.read(probe, 1000, 1 << 30)
    if got is None:  # nothing cached (an entry may exceed the budget), or not the tail
        assert cache.first_offset < 0 or probe < cache.first_offset or probe >= offset
    else:
        assert got[0].base_offset <= probe < got[0].next_offset
        assert got == [e for e in added if e.base_offset >= got[0].base_offset]
