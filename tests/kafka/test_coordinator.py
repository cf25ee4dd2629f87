"""The group coordinator's state machine, driven directly (no server, no client)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.protocols.kafka.coordinator import GroupCoordinator, GroupState, JoinResult
from magnetar.protocols.kafka.errors import ErrorCode, GroupError

PROTOCOLS = [("range", b"r"), ("roundrobin", b"rr")]


async def _join(
    coordinator: GroupCoordinator, member_id: str = "", *, session_ms: int = 10_000
) -> JoinResult:
    return await coordinator.join(
        "g",
        member_id,
        client_id="c",
        client_host="h",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=5_000,
        protocol_type="consumer",
        protocols=PROTOCOLS,
    )


async def _stable_pair(coordinator: GroupCoordinator) -> tuple[JoinResult, JoinResult]:
    first = await _join(coordinator)
    await coordinator.sync("g", first.generation, first.member_id, {first.member_id: b"all"})
    second_join = asyncio.ensure_future(_join(coordinator))
    await asyncio.sleep(0)  # let the second join register (a scheduling step, not a timer)
    with pytest.raises(GroupError) as rebalancing:
        coordinator.heartbeat("g", first.generation, first.member_id)
    assert rebalancing.value.wire_code == ErrorCode.REBALANCE_IN_PROGRESS
    first_again = await _join(coordinator, first.member_id)
    second = await second_join
    assert first_again.generation == second.generation == first.generation + 1
    leader, follower = (first_again, second) if first_again.members else (second, first_again)
    assignments = {leader.member_id: b"a", follower.member_id: b"b"}
    follower_sync = asyncio.ensure_future(
        coordinator.sync("g", follower.generation, follower.member_id, {})
    )
    assert await coordinator.sync("g", leader.generation, leader.member_id, assignments) == b"a"
    assert await follower_sync == b"b"
    return leader, follower


async def test_join_sync_and_rebalance_on_a_second_member() -> None:
    coordinator = GroupCoordinator()
    leader, follower = await _stable_pair(coordinator)
    group = coordinator.group("g")
    assert group is not None and group.state is GroupState.STABLE
    assert leader.protocol == "range" and len(leader.members) == 2 and follower.members == []
    with pytest.raises(GroupError) as stale:
        coordinator.heartbeat("g", leader.generation - 1, leader.member_id)
    assert stale.value.wire_code == ErrorCode.ILLEGAL_GENERATION
    await coordinator.aclose()


async def test_leave_and_commit_rules() -> None:
    coordinator = GroupCoordinator()
    leader, follower = await _stable_pair(coordinator)
    coordinator.check_commit("g", leader.generation, leader.member_id)
    with pytest.raises(GroupError):
        coordinator.check_commit("g", -1, "")  # the group has members: commit as one of them
    coordinator.leave("g", follower.member_id)
    group = coordinator.group("g")
    assert group is not None and group.state is GroupState.PREPARING_REBALANCE
    coordinator.check_commit("g", leader.generation, leader.member_id)  # allowed while preparing
    alone = await _join(coordinator, leader.member_id)
    assert alone.generation == leader.generation + 1 and len(alone.members) == 1
    with pytest.raises(GroupError) as unknown:
        coordinator.heartbeat("g", alone.generation, follower.member_id)
    assert unknown.value.wire_code == ErrorCode.UNKNOWN_MEMBER_ID
    coordinator.leave("g", leader.member_id)
    assert group.state is GroupState.EMPTY
    coordinator.check_commit("g", -1, "")  # an empty group takes standalone commits


async def test_a_silent_member_is_dropped_after_its_session_timeout() -> None:
    coordinator = GroupCoordinator()
    quiet = await _join(coordinator, session_ms=50)
    await coordinator.sync("g", quiet.generation, quiet.member_id, {quiet.member_id: b"x"})
    other = await _join(coordinator)  # waits until the silent member times out of the group
    assert other.generation == quiet.generation + 1
    assert [m for m, _ in other.members] == [other.member_id]
    await coordinator.aclose()


async def test_inconsistent_protocols_are_refused() -> None:
    coordinator = GroupCoordinator()
    await _join(coordinator)
    with pytest.raises(GroupError) as refused:
        await coordinator.join(
            "g",
            "",
            client_id="c",
            client_host="h",
            session_timeout_ms=1000,
            rebalance_timeout_ms=1000,
            protocol_type="consumer",
            protocols=[("sticky", b"")],
        )
    assert refused.value.wire_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    await coordinator.aclose()


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001])
async def test_a_session_timeout_outside_the_bounds_is_refused(session_ms: int) -> None:
    coordinator = GroupCoordinator(6_000, 1_800_000)
    with pytest.raises(GroupError, match=r"outside 6000\.\.1800000 ms") as refused:
        await _join(coordinator, session_ms=session_ms)
    assert refused.value.wire_code == ErrorCode.INVALID_SESSION_TIMEOUT
    group = coordinator.group("g")
    assert group is None or not group.members
    await coordinator.aclose()
