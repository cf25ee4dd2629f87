"""KIP-848's coordinator and assignors in-process: revocation before reassignment, epochs
that fence zombies, commit rules, timeouts (no server; the end-to-end tests with
confluent-kafka are in test_consumer_protocol.py and test_groups.py)."""

from __future__ import annotations

import asyncio
import re
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from magnetar.protocols.kafka import assignors
from magnetar.protocols.kafka.consumer_groups import ConsumerGroups, HeartbeatAnswer
from magnetar.protocols.kafka.errors import ErrorCode, GroupError

# -- assignors -----------------------------------------------------------------------------


def test_uniform_balances_and_keeps_what_members_own() -> None:
    subs = {m: {"t"} for m in ("a", "b", "c")}
    first = assignors.uniform(subs, {"t": 7}, {})
    assert sorted(len(v) for v in first.values()) == [2, 2, 3]
    assert set().union(*first.values()) == {("t", p) for p in range(7)}
    # a fourth member takes from the others; everyone else keeps a subset of what they had
    subs["d"] = {"t"}
    second = assignors.uniform(subs, {"t": 7}, first)
    assert sorted(len(v) for v in second.values()) == [1, 2, 2, 2]
    for m in ("a", "b", "c"):
        assert second[m] <= first[m]
    assert set().union(*second.values()) == {("t", p) for p in range(7)}


def test_uniform_gives_a_topic_only_to_its_subscribers() -> None:
    subs = {"a": {"x"}, "b": {"x", "y"}, "c": {"y"}}
    out = assignors.uniform(subs, {"x": 4, "y": 4}, {})
    assert all(t in subs[m] for m, tps in out.items() for t, _ in tps)
    assert set().union(*out.values()) == {(t, p) for t in "xy" for p in range(4)}
    assert max(len(v) for v in out.values()) - min(len(v) for v in out.values()) <= 1


def test_range_is_co_partitioned() -> None:
    subs = {"b": {"x", "y"}, "a": {"x", "y"}}
    out = assignors.range_(subs, {"x": 5, "y": 5}, {})
    assert out["a"] == {(t, p) for t in "xy" for p in range(3)}
    assert out["b"] == {(t, p) for t in "xy" for p in (3, 4)}


# -- the coordinator -----------------------------------------------------------------------

TOPICS = {"t": 4, "u": 2}


def _id(topic: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, topic)


async def _resolve(names: set[str], regexes: list[re.Pattern[str]]) -> dict[str, int]:
    return {t: n for t, n in TOPICS.items() if t in names or any(r.fullmatch(t) for r in regexes)}


def _groups(**kw: Any) -> ConsumerGroups:
    return ConsumerGroups(_resolve, _id, heartbeat_interval_ms=100, **kw)


def _hb(
    member: str = "",
    epoch: int = 0,
    owned: set[tuple[str, int]] | None = None,
    *,
    topics: list[str] | None = None,
    regex: str | None = None,
    assignor: str | None = None,
    group: str = "g",
) -> SimpleNamespace:
    parts = None
    if owned is not None:
        by: dict[str, list[int]] = {}
        for t, p in sorted(owned):
            by.setdefault(t, []).append(p)
        parts = [SimpleNamespace(topic_id=_id(t), partitions=ps) for t, ps in by.items()]
    return SimpleNamespace(
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=200,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=parts,
    )


class Client:
    """One member as a client would run it: heartbeats, takes what it is given."""

    def __init__(self, groups: ConsumerGroups, topics: list[str] | None = None) -> None:
        self.groups, self.topics = groups, topics or ["t"]
        self.member, self.epoch, self.owned = "", 0, set[tuple[str, int]]()

    async def beat(self, *, report: bool = True) -> HeartbeatAnswer:
        joining = self.epoch == 0
        answer = await self.groups.heartbeat(
            _hb(
                self.member,
                self.epoch,
                None if joining or not report else self.owned,
                topics=self.topics if joining else None,
            ),
            client_id="c",
            client_host="h",
        )
        self.member, self.epoch = answer.member_id, answer.member_epoch
        if answer.assignment is not None:
            self.owned = set(answer.assignment)  # revokes and assigns at once
        return answer


def _owners(clients: list[Client]) -> dict[tuple[str, int], int]:
    count: dict[tuple[str, int], int] = {}
    for c in clients:
        for tp in c.owned:
            count[tp] = count.get(tp, 0) + 1
    return count


async def test_a_partition_moves_only_after_its_owner_released_it() -> None:
    groups = _groups()
    a = Client(groups)
    await a.beat()
    assert a.owned == {("t", p) for p in range(4)} and a.epoch == 1
    b = Client(groups)
    await b.beat()
    # b joined (epoch 2) but a still owns everything: b gets nothing yet
    assert b.owned == set() and b.epoch == 2
    answer = await a.beat(report=False)  # a learns what to give up; keeps its epoch
    assert answer.member_epoch == 1 and len(a.owned) == 2
    await b.beat()
    assert b.owned == set(), "given before a reported the release"
    await a.beat()  # a reports it released: moves to epoch 2
    assert a.epoch == 2
    await b.beat()
    assert len(b.owned) == 2 and b.epoch == 2
    assert all(n == 1 for n in _owners([a, b]).values())
    assert set(_owners([a, b])) == {("t", p) for p in range(4)}
    group = groups.groups["g"]
    assert group.state == "Stable"


async def test_random_schedules_never_give_a_partition_to_two_members() -> None:
    import random

    rng = random.Random(7)
    groups = _groups()
    clients = [Client(groups, ["t", "u"]) for _ in range(4)]
    joined: list[Client] = []
    for _ in range(300):
        c = rng.choice(clients)
        if c.epoch == 0 and c in joined:
            continue
        await c.beat(report=rng.random() < 0.8)
        if c not in joined:
            joined.append(c)
        if rng.random() < 0.05 and len(joined) > 1:  # someone leaves
            leaver = rng.choice(joined)
            await groups.heartbeat(_hb(leaver.member, -1), client_id="c", client_host="h")
            joined.remove(leaver)
            leaver.member, leaver.epoch, leaver.owned = "", 0, set()
            clients.remove(leaver)
            clients.append(Client(groups, ["t", "u"]))
        assert all(n == 1 for n in _owners(joined).values()), _owners(joined)
    for _ in range(4):  # settle
        for c in joined:
            await c.beat()
    assert set(_owners(joined)) == {(t, p) for t, n in TOPICS.items() for p in range(n)}


async def test_epochs_fence_zombies_and_commits() -> None:
    groups = _groups()
    a = Client(groups)
    await a.beat()
    with pytest.raises(GroupError) as e:
        await groups.heartbeat(_hb(a.member, a.epoch + 5, set()), client_id="c", client_host="h")
    assert e.value.wire_code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(GroupError) as e:
        await groups.heartbeat(_hb("nobody", 3, set()), client_id="c", client_host="h")
    assert e.value.wire_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert groups.check_commit("g", a.member, a.epoch)
    with pytest.raises(GroupError) as e:
        groups.check_commit("g", a.member, a.epoch - 1)
    assert e.value.wire_code == ErrorCode.STALE_MEMBER_EPOCH
    with pytest.raises(GroupError) as e:
        groups.check_commit("g", a.member, a.epoch + 1)
    assert e.value.wire_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert not groups.check_commit("classic-group", "m", 1)  # not ours: classic rules


async def test_silent_member_expires_and_a_slow_revoker_is_removed() -> None:
    groups = _groups(session_timeout_ms=150)
    a, b = Client(groups), Client(groups)
    await a.beat()
    await b.beat()
    await a.beat(report=False)  # a must give two up; it never reports (rebalance timeout 200)
    assert len(a.owned) == 2
    for _ in range(6):  # b keeps heartbeating; a is silent past its session and timeout
        await asyncio.sleep(0.06)
        await b.beat()
    assert b.owned == {("t", p) for p in range(4)}
    with pytest.raises(GroupError) as e:
        await a.beat()
    assert e.value.wire_code == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"assignor": "sticky-magic"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"regex": "t(", "topics": None}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        ({"topics": None}, ErrorCode.INVALID_REQUEST),
        ({"group": ""}, ErrorCode.INVALID_REQUEST),
    ],
)
async def test_bad_joins_are_refused(kw: dict[str, Any], code: ErrorCode) -> None:
    groups = _groups()
    request = _hb(**{"topics": ["t"], **kw})
    with pytest.raises(GroupError) as e:
        await groups.heartbeat(request, client_id="c", client_host="h")
    assert e.value.wire_code == code


async def test_regex_and_range_assignor() -> None:
    groups = _groups()
    answer = await groups.heartbeat(
        _hb(regex="[tu]", topics=None, assignor="range"), client_id="c", client_host="h"
    )
    assert set(answer.assignment or []) == {(t, p) for t, n in TOPICS.items() for p in range(n)}
    assert groups.groups["g"].assignor == "range"
    described = groups.describe(groups.groups["g"])
    member = described["members"][0]
    assert member["subscribed_topic_regex"] == "[tu]"
    assert {e["topic_name"] for e in member["assignment"]["topic_partitions"]} == {"t", "u"}
