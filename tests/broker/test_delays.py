"""The delay index in process: due entries come out oldest time first, once."""

from __future__ import annotations

from magnetar.broker.delays import DelayIndex


def test_due_entries_come_out_in_time_order_once() -> None:
    index = DelayIndex()
    index.hold(10, at=300)
    index.hold(20, at=100)
    index.hold(30, at=200)
    index.hold(20, at=100)  # held again (read again after a restart): still once
    assert len(index) == 3 and 20 in index
    assert index.next_time() == 100
    assert index.pop_due(250) == [20, 30]
    assert index.pop_due(250) == []
    assert index.next_time() == 300
    assert index.pop_all() == [10]
    assert len(index) == 0 and index.next_time() is None


def test_a_new_time_replaces_the_old_one() -> None:
    index = DelayIndex()
    index.hold(5, at=100)
    index.hold(5, at=900)
    assert index.pop_due(500) == []
    assert index.pop_due(900) == [5]
