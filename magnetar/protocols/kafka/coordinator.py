"""The group coordinator: Kafka's consumer-group membership protocol, in memory.

Members join (JoinGroup), the coordinator waits until every known member has (re)joined or
the rebalance timeout passes, bumps the generation, picks a protocol (assignor) every member
supports and a leader; the leader computes the assignment client-side and hands it over in
SyncGroup, which gives every member its share. Heartbeats keep a member alive; one that
stays silent past its session timeout is removed, as is one that leaves, and either starts
a rebalance. Membership is not durable (Kafka's is not either, in effect: members rejoin);
committed offsets are, and live in the durable subscriptions (see ``groups``).

Static members (KIP-345, ``group.instance.id``): a member joining with an instance id the
group knows, and no member id, replaces the member that had it: it gets a new member id and
the old one's assignment, and in a stable group with unchanged subscription it is answered
at once, without a rebalance (its SyncGroup hands back the assignment). The replaced member
id is fenced: its heartbeats, syncs, commits and leaves answer FENCED_INSTANCE_ID. A static
member that stays silent past its session timeout is removed as any other.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field

from magnetar.protocols.kafka.errors import ErrorCode, GroupError


class GroupState(enum.Enum):
    EMPTY = "Empty"  # no members; committed offsets may exist
    PREPARING_REBALANCE = "PreparingRebalance"  # waiting for every member to (re)join
    COMPLETING_REBALANCE = "CompletingRebalance"  # joined; waiting for the leader's SyncGroup
    STABLE = "Stable"  # assignment handed out; members heartbeat


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation: int
    protocol: str
    leader: str
    member_id: str
    members: list[tuple[str, bytes]]  # (member id, metadata): for the leader only


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    instance_id: str | None = None  # a static member's group.instance.id
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[bytes] | None = None
    timer: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_timer: asyncio.TimerHandle | None = None
    static: dict[str, str] = field(default_factory=dict)  # instance id → its member id


class GroupCoordinator:
    """Every consumer group this node coordinates (this node coordinates them all)."""

    def __init__(self, min_session_ms: int = 1, max_session_ms: int = 30 * 60_000) -> None:
        self.groups: dict[str, Group] = {}
        self.min_session_ms, self.max_session_ms = min_session_ms, max_session_ms

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def known(self, group_id: str) -> Group:
        """The group, created empty if new (a commit makes a group known, as in Kafka)."""
        return self.groups.setdefault(group_id, Group(group_id))

    # -- join ---------------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        instance_id: str | None = None,
    ) -> JoinResult:
        """Wait for the rebalance this join starts (or joins) to complete; a static member
        that takes its place back in a stable group is answered at once."""
        if not group_id:
            raise GroupError(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
        self._check_session_timeout(session_timeout_ms)
        group = self.known(group_id)
        self._check_protocols(group, protocol_type, protocols)
        self._check_instance(group, member_id, instance_id)
        replaced = group.static.get(instance_id) if instance_id and not member_id else None
        if replaced is not None and replaced in group.members:
            member = self._replace_static(group, group.members[replaced])
            unchanged = self._same_subscription(group, member, protocols)
        else:
            member = self._member_for(group, member_id, client_id, client_host)
            unchanged = False
        if instance_id:
            member.instance_id = instance_id
            group.static[instance_id] = member.member_id
        member.client_id, member.client_host = client_id or member.client_id, client_host
        member.protocols, member.session_timeout_ms = protocols, session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        group.protocol_type = protocol_type
        if unchanged:
            return self._rejoined(group, member)
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(ErrorCode.REBALANCE_IN_PROGRESS, "joined again"))
            member.join.exception()
        waiter = member.join = asyncio.get_running_loop().create_future()
        self._stop_timer(member)
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return await waiter

    def _check_session_timeout(self, session_ms: int) -> None:
        """Kafka refuses a member whose session timeout is outside the broker's bounds."""
        if not self.min_session_ms <= session_ms <= self.max_session_ms:
            raise GroupError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {session_ms} ms is outside {self.min_session_ms}.."
                f"{self.max_session_ms} ms (group_min/max_session_timeout_ms): "
                "ask for a session timeout inside them",
            )

    @staticmethod
    def _check_instance(group: Group, member_id: str, instance_id: str | None) -> None:
        """FENCED_INSTANCE_ID when ``member_id`` speaks for an instance id another member
        now holds (it was replaced by a newer member with that instance id)."""
        holder = group.static.get(instance_id) if instance_id else None
        if member_id and holder is not None and holder != member_id:
            raise GroupError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"member {member_id} was replaced by {holder}, a newer member with "
                f"group.instance.id {instance_id!r}",
            )

    def _replace_static(self, group: Group, old: Member) -> Member:
        """A new member id for a static member that joins again: it keeps the old member's
        assignment (and leadership); the old member id is fenced from now on."""
        self._stop_timer(old)
        for waiter in (old.join, old.sync):
            if waiter is not None and not waiter.done():
                waiter.set_exception(GroupError(ErrorCode.FENCED_INSTANCE_ID, "replaced"))
                waiter.exception()
        del group.members[old.member_id]
        member = Member(
            f"{old.client_id or 'member'}-{uuid.uuid4()}",
            old.client_id,
            old.client_host,
            old.session_timeout_ms,
            old.rebalance_timeout_ms,
            old.protocols,
            assignment=old.assignment,
        )
        group.members[member.member_id] = member
        if group.leader == old.member_id:
            group.leader = member.member_id
        return member

    @staticmethod
    def _same_subscription(
        group: Group, member: Member, protocols: list[tuple[str, bytes]]
    ) -> bool:
        """Whether a replaced static member rejoins a stable group as it was (no rebalance)."""
        if group.state is not GroupState.STABLE:
            return False
        before = member.metadata(group.protocol)
        return any(name == group.protocol and md == before for name, md in protocols)

    def _rejoined(self, group: Group, member: Member) -> JoinResult:
        """The answer to a static member back in a stable group: the current generation;
        the leader gets the members too (its SyncGroup in a stable group changes nothing)."""
        self._start_timer(group, member)
        everyone = [(m.member_id, m.metadata(group.protocol)) for m in group.members.values()]
        leader = group.leader or member.member_id
        return JoinResult(
            group.generation,
            group.protocol or "",
            leader,
            member.member_id,
            everyone if member.member_id == leader else [],
        )

    @staticmethod
    def _member_for(group: Group, member_id: str, client_id: str, client_host: str) -> Member:
        """The joining member: known (a rejoin) or new (an empty member id)."""
        if member_id:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group"
                )
            return member
        member = Member(f"{client_id or 'member'}-{uuid.uuid4()}", client_id, client_host, 0, 0, [])
        group.members[member.member_id] = member
        return member

    def _check_protocols(
        self, group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]
    ) -> None:
        if not protocols:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "no protocol offered")
        if not group.members:
            return
        if protocol_type != group.protocol_type:
            raise GroupError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {group.group_id} has protocol type {group.protocol_type!r}",
            )
        offered = {name for name, _ in protocols}
        common = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
        if not offered & common:
            raise GroupError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"none of {sorted(offered)} is supported by every member of {group.group_id}",
            )

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._fail_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.state = GroupState.PREPARING_REBALANCE
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        group.rebalance_timer = asyncio.get_running_loop().call_later(
            timeout / 1000, self._complete_join, group
        )

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and all(
            m.join is not None and not m.join.done() for m in group.members.values()
        ):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Close the join phase: members that did not rejoin in time are dropped."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for member in list(group.members.values()):
            if member.join is None or member.join.done():
                self._drop(group, member)
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = GroupState.EMPTY, None, None
            return
        group.protocol = self._choose_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        everyone = [(m.member_id, m.metadata(group.protocol)) for m in group.members.values()]
        for member in group.members.values():
            assert member.join is not None
            member.join.set_result(
                JoinResult(
                    group.generation,
                    group.protocol,
                    group.leader,
                    member.member_id,
                    everyone if member.member_id == group.leader else [],
                )
            )
            member.join = None
            self._start_timer(group, member)

    @staticmethod
    def _choose_protocol(group: Group) -> str:
        members = list(group.members.values())
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        votes: Counter[str] = Counter()
        for m in members:
            votes[next(n for n, _ in m.protocols if n in common)] += 1
        first = members[0]
        return max(
            (n for n, _ in first.protocols if n in common),
            key=lambda n: votes[n],
        )

    # -- sync, heartbeat, leave -------------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        instance_id: str | None = None,
    ) -> bytes:
        """This member's assignment; the leader's call supplies everyone's."""
        group, member = self._member(group_id, generation, member_id, instance_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing")
        if group.state is GroupState.STABLE:
            return member.assignment
        self._start_timer(group, member)
        waiter = member.sync = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            for m in group.members.values():
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result(m.assignment)
                m.sync = None
        return await waiter

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> None:
        """Keep the member alive; GroupError(REBALANCE_IN_PROGRESS) tells it to rejoin."""
        group, member = self._member(group_id, generation, member_id, instance_id)
        self._start_timer(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: rejoin")

    def leave(self, group_id: str, member_id: str, instance_id: str | None = None) -> None:
        """Remove a member (a static one may be named by its instance id alone, as the admin
        client's remove-members does)."""
        group = self.groups.get(group_id)
        if group is not None and instance_id:
            self._check_instance(group, member_id, instance_id)
            member_id = member_id or group.static.get(instance_id, "")
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        self._remove(group, member)

    def check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> None:
        """May this member commit offsets now (Kafka's rules)? Raises GroupError if not."""
        group = self.known(group_id)
        self._check_instance(group, member_id, instance_id)
        if generation < 0 and not group.members:
            return  # an admin, or a consumer outside group management (whatever its id)
        if generation < 0 and not member_id:
            if group.members:
                raise GroupError(
                    ErrorCode.ILLEGAL_GENERATION, "the group has members: commit as one"
                )
            return
        self._member(group_id, generation, member_id, instance_id)
        if group.state is GroupState.COMPLETING_REBALANCE:
            raise GroupError(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing")

    def _member(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is not None:
            self._check_instance(group, member_id, instance_id)
        member = group.members.get(member_id) if group else None
        if group is None or member is None:
            raise GroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        if generation != group.generation:
            raise GroupError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the group's ({group.generation})",
            )
        return group, member

    # -- membership changes -----------------------------------------------------------------

    def _remove(self, group: Group, member: Member) -> None:
        self._drop(group, member)
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(ErrorCode.UNKNOWN_MEMBER_ID, "left the group"))
            member.join.exception()
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        elif group.members:
            self._prepare_rebalance(group)
        else:
            self._fail_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
            group.state, group.protocol, group.leader = GroupState.EMPTY, None, None
            group.generation += 1

    def _drop(self, group: Group, member: Member) -> None:
        self._stop_timer(member)
        group.members.pop(member.member_id, None)
        if member.instance_id and group.static.get(member.instance_id) == member.member_id:
            del group.static[member.instance_id]
        if member.sync is not None and not member.sync.done():
            member.sync.set_exception(GroupError(ErrorCode.UNKNOWN_MEMBER_ID, "left the group"))
            member.sync.exception()

    def _fail_syncs(self, group: Group, code: ErrorCode) -> None:
        for m in group.members.values():
            if m.sync is not None and not m.sync.done():
                m.sync.set_exception(GroupError(code, "the group is rebalancing"))
                m.sync.exception()
            m.sync = None

    def _start_timer(self, group: Group, member: Member) -> None:
        self._stop_timer(member)
        member.timer = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire, group, member
        )

    @staticmethod
    def _stop_timer(member: Member) -> None:
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None

    def _expire(self, group: Group, member: Member) -> None:
        """Session timeout: the member is presumed dead."""
        if group.members.get(member.member_id) is member and member.join is None:
            self._remove(group, member)

    def discard(self, group_id: str) -> None:
        """Forget ``group_id`` and stop its timers (it became a consumer group)."""
        group = self.groups.pop(group_id)
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        for member in group.members.values():
            self._stop_timer(member)

    def adopt(self, group: Group) -> None:
        """Take over ``group`` (a consumer group turned classic again): its members keep
        their partitions and rejoin in the rebalance this starts."""
        self.groups[group.group_id] = group
        group.state = GroupState.STABLE
        self._prepare_rebalance(group)
        for member in group.members.values():
            self._start_timer(group, member)

    async def aclose(self) -> None:
        for group in self.groups.values():
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            for member in group.members.values():
                self._stop_timer(member)
