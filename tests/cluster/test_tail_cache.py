"""The tail cache of a replicated partition: what a reader at the tail is given while
appends are in flight (their offsets are assigned, their acknowledgements not yet in)."""

from __future__ import annotations

from magnetar.core.entries import Entry
from magnetar.ledger.segmented import Tail as _Tail


def _entry(base: int, count: int) -> Entry:
    return Entry(base, count, 1, -1, 0, b"x" * count)


def test_a_read_past_the_last_confirmed_entry_returns_nothing_yet() -> None:
    """The regression: a subscription reading at an offset whose append was in flight got
    the last confirmed entry again, made no progress, and spun without awaiting: the
    broker's event loop hung with a consumer at the tail while a producer published."""
    tail = _Tail(budget=1 << 20)
    tail.add(_entry(0, 3))
    tail.add(_entry(3, 2))
    assert tail.read(5, 10, 1 << 20) == []  # offsets 5.. assigned, not confirmed
    assert tail.read(9, 10, 1 << 20) == []
    assert [e.base_offset for e in tail.read(4, 10, 1 << 20) or []] == [3]  # inside a batch
    assert [e.base_offset for e in tail.read(0, 10, 1 << 20) or []] == [0, 3]
    tail.add(_entry(5, 1))
    assert [e.base_offset for e in tail.read(5, 10, 1 << 20) or []] == [5]


def test_a_read_older_than_the_tail_goes_to_the_storage_nodes() -> None:
    tail = _Tail(budget=4)  # room for one 3-byte entry and a bit
    tail.add(_entry(0, 3))
    tail.add(_entry(3, 3))
    assert tail.read(0, 10, 1 << 20) is None
    assert [e.base_offset for e in tail.read(3, 10, 1 << 20) or []] == [3]
    assert _Tail(budget=100).read(0, 10, 100) is None  # empty: nothing cached
