"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor maps each member's subscribed topics (names, already resolved from names and
regexes) and each topic's partition count to the partitions every member should own: the
group's *target assignment*. Both are deterministic for the same input, and both keep a
member's partitions where they can (``current``), so a rebalance moves as few as it must.

- ``uniform`` (the default, as in Kafka): every partition of a subscribed topic goes to a
  member subscribed to it, and counts differ by at most one between members with the same
  subscription. Partitions a member already owns stay with it up to its share.
- ``range``: per topic, the members subscribed to it (in member-id order) get contiguous
  ranges, the first ``n % m`` one partition more; members subscribed to the same topics get
  the same partition numbers of each (co-partitioned joins).

Pure code, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, set[TopicPartition]]  # member id → the partitions it should own


def uniform(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, set[TopicPartition]],
) -> Assignment:
    """Balanced and sticky: see the module docstring."""
    members = sorted(subscriptions)
    out: Assignment = {m: set() for m in members}
    if not members:
        return out
    wanted = _all_partitions(subscriptions, partitions)
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in wanted}
    owner = {tp: m for m in members for tp in current.get(m, ()) if tp in eligible}
    # keep what members own, up to their whole share
    quota = _quotas(members, subscriptions, partitions)
    for tp, m in sorted(owner.items()):
        if m in eligible[tp] and len(out[m]) < quota[m]:
            out[m].add(tp)
    taken = set().union(*out.values())
    # hand out the rest, each to the eligible member with the fewest partitions (its
    # previous owner among equals)
    for tp in wanted:
        if tp not in taken:
            m = min(eligible[tp], key=lambda x: (len(out[x]), owner.get(tp) != x, x))
            out[m].add(tp)
    return out


def range_(
    subscriptions: Mapping[str, set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, set[TopicPartition]],
) -> Assignment:
    """Contiguous ranges per topic: see the module docstring (``current`` is not needed:
    the same members and topics always give the same ranges)."""
    del current
    out: Assignment = {m: set() for m in sorted(subscriptions)}
    topics = sorted(set().union(*subscriptions.values())) if subscriptions else []
    for topic in topics:
        n = partitions.get(topic, 0)
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if not members or n <= 0:
            continue
        each, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = each + (1 if i < extra else 0)
            out[m].update((topic, p) for p in range(start, start + count))
            start += count
    return out


ASSIGNORS = {"uniform": uniform, "range": range_}
DEFAULT = "uniform"


def _all_partitions(
    subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int]
) -> list[TopicPartition]:
    topics = sorted(set().union(*subscriptions.values()))
    return [(t, p) for t in topics for p in range(partitions.get(t, 0))]


def _quotas(
    members: list[str], subscriptions: Mapping[str, set[str]], partitions: Mapping[str, int]
) -> dict[str, int]:
    """How many partitions a member keeps for sure: its topics' partitions over the members
    subscribed to each, rounded down (the remainder goes to the members with fewest)."""
    quota = {}
    for m in members:
        share = 0.0
        for topic in subscriptions[m]:
            subscribers = sum(1 for o in members if topic in subscriptions[o])
            share += partitions.get(topic, 0) / subscribers
        quota[m] = int(share + 1e-9)
    return quota
