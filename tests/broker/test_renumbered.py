"""``Producer.renumbered``: which repeated sequence ids of one attachment are new messages.

Only the restart of pulsar-client's numbering after a reconnect (at exactly the told id + 1,
after higher ids were resent) makes ids new; every other repeat keeps Pulsar's meaning, a
duplicate. The end-to-end case is tests/durability/test_dedup_loss.py."""

from __future__ import annotations

from typing import Any

from magnetar.broker.topic import AccessMode, Producer


def _producer(told: int, *, reconnected: bool) -> Producer:
    topic: Any = None
    p = Producer(topic, "standalone-0-0", AccessMode.SHARED, False)
    p.told_last_sequence, p.reconnected = told, reconnected
    return p


def test_a_restarted_numbering_after_a_reconnect_is_new_up_to_what_was_resent() -> None:
    p = _producer(-1, reconnected=True)
    assert [p.renumbered(s, s) for s in range(10)] == [False] * 10  # the resends
    assert [p.renumbered(s, s) for s in range(12)] == [True] * 10 + [False] * 2


def test_a_restart_in_batches_is_recognised_by_the_batch_first_id() -> None:
    p = _producer(4, reconnected=True)
    assert not p.renumbered(5, 9) and not p.renumbered(10, 14)  # resent batches
    assert p.renumbered(5, 9) and p.renumbered(10, 14)
    assert not p.renumbered(15, 19)


def test_repeated_ids_of_a_first_attachment_stay_duplicates() -> None:
    """An application's explicit ids, resent on the same connection: Pulsar drops them."""
    p = _producer(-1, reconnected=False)
    assert not any(p.renumbered(s, s) for s in (0, 1, 2, 0, 1))


def test_a_reconnected_client_repeating_another_id_keeps_the_duplicate_meaning() -> None:
    p = _producer(9, reconnected=True)
    assert not any(p.renumbered(s, s) for s in (10, 11, 12))
    assert not p.renumbered(11, 11)  # not the told id + 1: a resend by the application
    assert not p.renumbered(5, 5)  # at or below the told id: stored before, a duplicate
