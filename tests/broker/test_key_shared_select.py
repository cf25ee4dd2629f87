"""The Key_Shared dispatch decisions (magnetar.broker.key_shared), in process: a consumer
without permits makes only its own keys wait; a key keeps its order; a key that moved to
another consumer waits until its old owner has settled it; parking is bounded."""

from __future__ import annotations

import struct

from magnetar.broker import key_shared
from magnetar.core.entries import Entry
from magnetar.core.formats import PULSAR
from magnetar.protocols.pulsar._proto import pulsar_api_pb2 as pb


def entry(base: int, key: str) -> Entry:
    """A stored Pulsar entry of one message with partition key ``key``."""
    meta = pb.MessageMetadata(
        producer_name="p", sequence_id=base, publish_time=1, partition_key=key
    ).SerializeToString()
    return Entry(base, 1, 1, -1, PULSAR, struct.pack(">I", len(meta)) + meta + b"x", 7)


def hash_of(key: str) -> int:
    return key_shared.key_hash(entry(0, key))


# Keys a* belong to consumer "A", keys b* to "B".
def owner(h: int) -> str:
    return next(k[0].upper() for k in ("a1", "a2", "b1", "b2") if hash_of(k) == h)


def select(
    replayed: list[Entry],
    fresh: list[Entry],
    room: dict[str, int],
    *,
    draining: dict[int, set[str]] | None = None,
    look_ahead: int = 100,
    settled: frozenset[int] = frozenset(),
) -> key_shared.Selection[str]:
    return key_shared.select(
        replayed,
        fresh,
        owner_of=owner,
        room=room,
        draining=draining or {},
        look_ahead=look_ahead,
        settled=lambda e: e.base_offset in settled,
    )


def bases(chosen: key_shared.Selection[str]) -> list[int]:
    return [e.base_offset for e, _ in chosen.deliver]


def test_a_consumer_without_permits_makes_only_its_keys_wait() -> None:
    fresh = [entry(0, "b1"), entry(1, "a1"), entry(2, "b2"), entry(3, "a2"), entry(4, "a1")]
    chosen = select([], fresh, {"A": 10, "B": 0})
    assert bases(chosen) == [1, 3, 4]  # A's go on (before: nothing, head-of-line at 0)
    assert chosen.park == [0, 2]
    assert chosen.read_to == 5


def test_permits_run_out_inside_a_pass() -> None:
    room = {"A": 2, "B": 5}
    chosen = select([], [entry(i, "a1" if i % 2 else "b1") for i in range(8)], room)
    assert bases(chosen) == [0, 1, 2, 3, 4, 6]  # A takes two, then its key waits
    assert chosen.park == [5, 7]
    assert room == {"A": 0, "B": 1}


def test_a_waiting_entry_holds_back_later_entries_of_its_key() -> None:
    # B had no permits earlier: 3 waits. Now B has room for one: 3 goes, not 5 ahead of 4.
    chosen = select(
        [entry(3, "b1"), entry(4, "b1")], [entry(5, "b1"), entry(6, "a1")], {"A": 5, "B": 1}
    )
    assert bases(chosen) == [3, 6]
    assert chosen.park == [5]  # after 4, which stays waiting


def test_a_key_that_moved_waits_for_its_old_owner() -> None:
    # Consumer "Z" received b1 entries when b1 was its key and has not acknowledged them;
    # the ring now gives b1 to B. b1 waits until Z settles them; b2 goes.
    draining = {hash_of("b1"): {"Z"}, hash_of("b2"): {"B"}}
    chosen = select([], [entry(0, "b1"), entry(1, "b2")], {"B": 5}, draining=draining)
    assert bases(chosen) == [1]  # its own pending b2 entries do not hold B back
    assert chosen.park == [0]


def test_parking_is_bounded_and_the_rest_stays_unread() -> None:
    fresh = [entry(i, "b1") for i in range(5)] + [entry(5, "a1")]
    chosen = select([], fresh, {"A": 5, "B": 0}, look_ahead=2)
    assert chosen.park == [0, 1]
    assert bases(chosen) == []
    assert chosen.read_to == 2  # the next pass reads from 2 again


def test_settled_new_entries_are_passed_over() -> None:
    chosen = select([], [entry(0, "a1"), entry(1, "b1")], {"A": 0, "B": 0}, settled=frozenset({0}))
    assert (bases(chosen), chosen.park, chosen.read_to) == ([], [1], 2)
