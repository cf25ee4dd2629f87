"""KIP-848 consumer groups (``group.protocol=consumer``): the coordinator assigns partitions.

A member sends one request, ConsumerGroupHeartbeat, to join (epoch 0), stay alive, report
the partitions it owns and leave (epoch -1). The coordinator keeps, per group:

- the **group epoch**, bumped by every change that can move partitions: a member joins or
  leaves or times out, a subscription or the server assignor changes, a subscribed topic
  appears or gains partitions (topics are resolved again every ``REFRESH_S`` on heartbeats);
- the **target assignment** of that epoch, computed by the server assignor
  (``magnetar.protocols.kafka.assignors``) when the assignment epoch falls behind;
- per member, its **epoch**, the partitions it **owns** and those being **revoked**.

Reconciliation moves each member to the target without two members ever owning one
partition: partitions the target takes away are withdrawn first (the member's epoch stays,
its next assignment lacks them); once the member reports that it released them, it moves to
the assignment epoch and gains the target partitions no other member still holds, and later
heartbeats add the rest as their owners release them. A member that does not release in its
rebalance timeout, or stays silent for the session timeout, is removed and its partitions
freed. Epoch checks fence zombies: a heartbeat or commit with an epoch the member does not
have is refused (FENCED_MEMBER_EPOCH; STALE_MEMBER_EPOCH for an older commit), and the client
rejoins. State is in memory, as in the classic coordinator: a new coordinator makes members
rejoin; committed offsets are durable subscriptions (see ``groups``).

Static members (``group.instance.id``): leaving with epoch -2 keeps the member, its epoch and
its partitions for its session timeout; a member joining with that instance id meanwhile
takes its place (a new member id, the same epoch and assignment) without a new group epoch,
so nobody else's partitions move. Joining with an instance id a live member holds is refused
(UNRELEASED_INSTANCE_ID); a heartbeat from a member id whose instance id another member now
holds is FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from magnetar.protocols.kafka import assignors, wire
from magnetar.protocols.kafka.coordinator import JoinResult
from magnetar.protocols.kafka.errors import ErrorCode, GroupError

TopicPartition = tuple[str, int]
# (topic names, topic regexes) → {existing topic: partition count} of every topic they name
Resolver = Callable[[set[str], list[re.Pattern[str]]], Awaitable[dict[str, int]]]
LEAVE_EPOCHS = (-1, -2)  # -1 leaves; -2 is a static member's temporary leave
REFRESH_S = 2.0  # how old the group's view of its topics may get before a heartbeat renews it


@dataclass(eq=False)
class ClassicState:
    """What a classic-protocol member of a consumer group (an online upgrade or downgrade in
    progress) told JoinGroup, and the assignment its SyncGroup hands out."""

    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (client assignor name, ConsumerProtocolSubscription)
    assignment: frozenset[TopicPartition] = frozenset()


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    topic_names: set[str] = field(default_factory=set)
    regex: re.Pattern[str] | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    owned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    sent: frozenset[TopicPartition] | None = None  # the assignment it was last given
    static_left: bool = False  # a static member that left with epoch -2 (may come back)
    session: asyncio.TimerHandle | None = None
    revocation: asyncio.TimerHandle | None = None
    classic: ClassicState | None = None  # set for a member speaking the classic protocol

    def subscribed(self, topics: Iterable[str]) -> set[str]:
        """Which of ``topics`` this member subscribes to, by name or regex."""
        regex = self.regex
        return {t for t in topics if t in self.topic_names or (regex and regex.fullmatch(t))}


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = assignors.DEFAULT
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)  # subscribed topic → count
    resolved_at: float = float("-inf")
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def state(self) -> str:
        """Kafka's consumer-group state names, as ConsumerGroupDescribe reports them."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        settled = all(
            m.epoch == self.assignment_epoch
            and not m.revoking
            and m.owned == self.target.get(m.member_id, set())
            for m in self.members.values()
        )
        return "Stable" if settled else "Reconciling"


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: list[TopicPartition] | None  # None: unchanged since the member's last answer


class ConsumerGroups:
    """Every KIP-848 group this node coordinates."""

    def __init__(
        self,
        resolve: Resolver,
        topic_id: Callable[[str], uuid.UUID],
        *,
        heartbeat_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        downgrade: Callable[[ConsumerGroup], None] | None = None,
    ) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        # called when only classic members remain (the group becomes classic again)
        self._downgrade = downgrade
        self._resolve, self._topic_id = resolve, topic_id
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms

    def active(self, group_id: str) -> bool:
        """True while ``group_id`` is a consumer-protocol group with members."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def adopt(self, group: ConsumerGroup) -> None:
        """Take over ``group`` (a classic group turned consumer group): its members' sessions
        start now."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._touch(group, member)

    def forget(self, group_id: str) -> None:
        """Drop an empty group (a classic consumer takes the id over, as Kafka converts)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    # -- heartbeat ------------------------------------------------------------------------

    async def heartbeat(self, b: Any, *, client_id: str, client_host: str) -> HeartbeatAnswer:
        """Serve one ConsumerGroupHeartbeat (``b`` is the decoded request body)."""
        if not b.group_id:
            raise GroupError(ErrorCode.INVALID_REQUEST, "the group id must not be empty")
        group = self.groups.setdefault(b.group_id, ConsumerGroup(b.group_id))
        async with group.lock:
            self._check_instance(group, b)
            if b.member_epoch in LEAVE_EPOCHS:
                member = self._known(group, b.member_id)
                if b.member_epoch == -2 and member.instance_id:
                    member.static_left = True  # kept for its session timeout
                else:
                    self._remove(group, member)
                return HeartbeatAnswer(member.member_id, b.member_epoch, 0, None)
            joined = b.member_epoch == 0
            replaced = self._static_return(group, b, client_id, client_host) if joined else None
            if replaced is not None:
                member, reported, joined = replaced, None, False
            elif joined:
                member = self._join(group, b, client_id, client_host)
                reported = None
            else:
                member = self._known(group, b.member_id)
                reported = self._reported(group, b.topic_partitions)
                self._check_epoch(member, b.member_epoch, reported)
            self._touch(group, member)
            changed = self._subscribe(member, b) or joined
            if changed or time.monotonic() - group.resolved_at > REFRESH_S:
                changed |= await self._refresh(group)
            if changed:  # one epoch for everything this heartbeat changed
                group.epoch += 1
            if group.assignment_epoch < group.epoch:
                self._assign(group)
            self._reconcile(group, member, reported)
            owned = frozenset(member.owned)
            news = owned != member.sent or (reported is not None and reported != owned)
            member.sent = owned
            return HeartbeatAnswer(
                member.member_id,
                member.epoch,
                self.heartbeat_interval_ms,
                sorted(owned) if news else None,
            )

    @staticmethod
    def _holder(group: ConsumerGroup, instance_id: str | None) -> ConsumerMember | None:
        """The member holding static ``instance_id``, if any."""
        if not instance_id:
            return None
        return next((m for m in group.members.values() if m.instance_id == instance_id), None)

    def _check_instance(self, group: ConsumerGroup, b: Any) -> None:
        """Refuse a request that speaks for an instance id another member holds."""
        holder = self._holder(group, b.instance_id)
        if holder is None or holder.member_id == b.member_id:
            return
        if b.member_epoch == 0 and holder.static_left:
            return  # it takes the departed member's place (see _static_return)
        if b.member_epoch == 0:
            raise GroupError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"group.instance.id {b.instance_id!r} is held by live member "
                f"{holder.member_id}: close that consumer first",
            )
        raise GroupError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"member {b.member_id} was replaced by {holder.member_id}, a newer member with "
            f"group.instance.id {b.instance_id!r}",
        )

    def _static_return(
        self, group: ConsumerGroup, b: Any, client_id: str, host: str
    ) -> ConsumerMember | None:
        """A static member back after leaving with epoch -2: the new member id takes the old
        member's epoch and partitions, with no new group epoch. None for any other join."""
        old = self._holder(group, b.instance_id)
        if old is None or not old.static_left or old.member_id == b.member_id:
            return None
        self._stop(old, "session")
        self._stop(old, "revocation")
        del group.members[old.member_id]
        member = dataclasses.replace(
            old,
            member_id=b.member_id or str(uuid.uuid4()),
            client_id=client_id,
            client_host=host,
            static_left=False,
            sent=None,
            session=None,
            revocation=None,
        )
        group.members[member.member_id] = member
        if old.member_id in group.target:
            group.target[member.member_id] = group.target.pop(old.member_id)
        return member

    def _join(self, group: ConsumerGroup, b: Any, client_id: str, host: str) -> ConsumerMember:
        """A new member, or one rejoining from scratch (its old partitions are freed)."""
        if b.subscribed_topic_names is None and not getattr(b, "subscribed_topic_regex", None):
            raise GroupError(
                ErrorCode.INVALID_REQUEST,
                "a joining member must send SubscribedTopicNames or SubscribedTopicRegex",
            )
        old = group.members.get(b.member_id) if b.member_id else None
        if old is not None:
            self._remove(group, old)
        member = ConsumerMember(b.member_id or str(uuid.uuid4()), client_id, host)
        member.instance_id, member.rack_id = b.instance_id, b.rack_id
        if b.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = b.rebalance_timeout_ms
        group.members[member.member_id] = member
        return member

    @staticmethod
    def _known(group: ConsumerGroup, member_id: str) -> ConsumerMember:
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member {member_id!r} is not in group {group.group_id!r}: rejoin with epoch 0",
            )
        return member

    @staticmethod
    def _check_epoch(
        member: ConsumerMember, epoch: int, reported: set[TopicPartition] | None
    ) -> None:
        """The member's own epoch, or its previous one when it reports no partition it was
        not given (the answer that moved it on was lost): anything else is a zombie."""
        if epoch == member.epoch:
            return
        if epoch == member.previous_epoch and reported is not None and reported <= member.owned:
            return
        raise GroupError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"epoch {epoch} is not member {member.member_id}'s ({member.epoch}): rejoin",
        )

    def _reported(self, group: ConsumerGroup, topic_partitions: Any) -> set[TopicPartition] | None:
        """The partitions a member says it owns, by topic name (unknown ids dropped)."""
        if topic_partitions is None:
            return None
        names = {self._topic_id(t): t for t in group.partitions}
        return {
            (names[tp.topic_id], p)
            for tp in topic_partitions
            if tp.topic_id in names
            for p in tp.partitions
        }

    @staticmethod
    def _subscribe(member: ConsumerMember, b: Any) -> bool:
        """Apply the request's subscription and assignor; True when they changed."""
        changed = False
        if b.subscribed_topic_names is not None:
            names = set(b.subscribed_topic_names)
            changed |= names != member.topic_names
            member.topic_names = names
        pattern = getattr(b, "subscribed_topic_regex", None)
        if pattern is not None:
            regex = _compile(pattern) if pattern else None
            changed |= regex != member.regex
            member.regex = regex
        if b.server_assignor is not None:
            if b.server_assignor not in assignors.ASSIGNORS:
                raise GroupError(
                    ErrorCode.UNSUPPORTED_ASSIGNOR,
                    f"server assignor {b.server_assignor!r} is not one of "
                    f"{sorted(assignors.ASSIGNORS)}",
                )
            changed |= b.server_assignor != member.assignor
            member.assignor = b.server_assignor
        return changed

    async def _refresh(self, group: ConsumerGroup) -> bool:
        """Resolve the members' subscriptions to topics and partition counts again; True
        when they changed (a new group epoch)."""
        names = set().union(*(m.topic_names for m in group.members.values()))
        regexes = [m.regex for m in group.members.values() if m.regex is not None]
        partitions = await self._resolve(names, regexes)
        group.resolved_at = time.monotonic()
        changed = partitions != group.partitions
        group.partitions = partitions
        return changed

    def _assign(self, group: ConsumerGroup) -> None:
        """Compute the target assignment of the group epoch."""
        chosen = Counter(m.assignor for m in group.members.values() if m.assignor)
        group.assignor = min(chosen, key=lambda a: (-chosen[a], a)) if chosen else assignors.DEFAULT
        subscriptions = {
            m.member_id: m.subscribed(group.partitions) for m in group.members.values()
        }
        current = {m.member_id: m.owned | m.revoking for m in group.members.values()}
        group.target = assignors.ASSIGNORS[group.assignor](subscriptions, group.partitions, current)
        group.assignment_epoch = group.epoch

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, reported: set[TopicPartition] | None
    ) -> None:
        """Move ``member`` toward its target: revoke first, then take what is free."""
        target = group.target.get(member.member_id, set())
        if reported is not None and member.revoking:
            member.revoking &= reported  # what it no longer reports, it has released
        withdrawn = member.owned - target
        if withdrawn:
            member.owned -= withdrawn
            member.revoking |= withdrawn
        if member.revoking:
            if member.revocation is None:
                member.revocation = asyncio.get_running_loop().call_later(
                    member.rebalance_timeout_ms / 1000, self._revocation_expired, group, member
                )
            return  # its epoch stays until it gives them up
        self._stop(member, "revocation")
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        held: set[TopicPartition] = set()
        for other in group.members.values():
            if other is not member:
                held |= other.owned | other.revoking
        member.owned |= target - held

    # -- classic members (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) ----------------------

    async def classic_join(
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
        """A classic JoinGroup into this consumer group: the coordinator assigns, as for any
        member; the member is its own follower (no leader assigns): its generation is its
        epoch, and SyncGroup then hands out the partitions."""
        group = self._active(group_id)
        async with group.lock:
            if protocol_type != "consumer" or not protocols:
                raise GroupError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"group {group_id} is a consumer group: join with protocol type 'consumer'",
                )
            subscription = _subscription(protocols[0][1])
            member = group.members.get(member_id) if member_id else None
            if member_id and member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group"
                )
            if member is not None and member.classic is None:
                raise GroupError(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"member {member_id} uses group.protocol=consumer",
                )
            joined = member is None
            if member is None:
                member = ConsumerMember(f"{client_id or 'member'}-{uuid.uuid4()}", client_id,
                                        client_host)  # fmt: skip
                group.members[member.member_id] = member
            member.classic = ClassicState(session_timeout_ms, protocol_type, protocols)
            member.rebalance_timeout_ms = rebalance_timeout_ms
            changed = joined or set(subscription.topics) != member.topic_names
            member.topic_names = set(subscription.topics)
            # what it still owns (cooperative); an eager member gave everything up already
            reported = _owned(subscription)
            member.owned &= reported
            self._touch(group, member)
            if changed or time.monotonic() - group.resolved_at > REFRESH_S:
                changed |= await self._refresh(group)
            if changed:
                group.epoch += 1
            if group.assignment_epoch < group.epoch:
                self._assign(group)
            self._reconcile(group, member, reported)
            member.classic.assignment = frozenset(member.owned)
            return JoinResult(member.epoch, protocols[0][0], "", member.member_id, [])

    def classic_sync(self, group_id: str, generation: int, member_id: str) -> bytes:
        """The partitions given at the member's last JoinGroup (ConsumerProtocolAssignment)."""
        member = self._classic(group_id, generation, member_id)
        assert member.classic is not None
        return wire.encode_assignment(member.classic.assignment)

    async def classic_heartbeat(self, group_id: str, generation: int, member_id: str) -> None:
        """Keep a classic member alive; REBALANCE_IN_PROGRESS when it must rejoin to give up
        or take partitions or to move to the group's assignment epoch."""
        group = self._active(group_id)
        async with group.lock:
            member = self._classic(group_id, generation, member_id)
            self._touch(group, member)
            if time.monotonic() - group.resolved_at > REFRESH_S and await self._refresh(group):
                group.epoch += 1
            if group.assignment_epoch < group.epoch:
                self._assign(group)
            target = group.target.get(member.member_id, set())
            held: set[TopicPartition] = set()
            for other in group.members.values():
                if other is not member:
                    held |= other.owned | other.revoking
            if (
                member.epoch != group.assignment_epoch
                or member.owned - target
                or (target - member.owned) - held
            ):
                raise GroupError(
                    ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing: rejoin"
                )

    def classic_leave(self, group_id: str, member_id: str) -> None:
        group = self._active(group_id)
        self._remove(group, self._known(group, member_id))

    def _active(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id} moved: retry")
        return group

    def _classic(self, group_id: str, generation: int, member_id: str) -> ConsumerMember:
        member = self._known(self._active(group_id), member_id)
        if member.classic is None:
            raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "not a classic member")
        if generation != member.epoch:
            raise GroupError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} is not the member's ({member.epoch}): rejoin",
            )
        return member

    # -- commits, describe --------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, epoch: int) -> bool:
        """Kafka's commit rules for a consumer-protocol group: False when ``group_id`` is not
        one (the classic rules apply); raises GroupError when the commit is refused."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        if epoch < 0 and not group.members:
            return True  # an admin or a consumer outside group management (any member id)
        member = self._known(group, member_id)
        if member.classic is not None and epoch != member.epoch:
            raise GroupError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {epoch} is not the member's ({member.epoch}): rejoin",
            )
        if epoch > member.epoch:
            raise GroupError(
                ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {epoch} is ahead of the member's"
            )
        if epoch < member.epoch:
            raise GroupError(
                ErrorCode.STALE_MEMBER_EPOCH,
                f"epoch {epoch} is older than the member's ({member.epoch}): commit again",
            )
        return True

    def describe(self, group: ConsumerGroup) -> dict[str, Any]:
        """The ConsumerGroupDescribe entry of ``group``."""
        return {
            "error_code": 0,
            "group_id": group.group_id,
            "group_state": group.state,
            "group_epoch": group.epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": sorted(m.topic_names),
                    "subscribed_topic_regex": m.regex.pattern if m.regex else None,
                    "assignment": self.assignment(m.owned, with_names=True),
                    "target_assignment": self.assignment(
                        group.target.get(m.member_id, set()), with_names=True
                    ),
                }
                for m in group.members.values()
            ],
        }

    def assignment(
        self, partitions: Iterable[TopicPartition], *, with_names: bool = False
    ) -> dict[str, Any]:
        """Partitions in the wire's Assignment shape: per topic id (and name)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            by_topic.setdefault(topic, []).append(p)
        entries = []
        for topic, parts in by_topic.items():
            entry: dict[str, Any] = {"topic_id": self._topic_id(topic), "partitions": parts}
            if with_names:
                entry["topic_name"] = topic
            entries.append(entry)
        return {"topic_partitions": entries}

    # -- membership -----------------------------------------------------------------------

    def _touch(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._stop(member, "session")
        timeout = member.classic.session_timeout_ms if member.classic else self.session_timeout_ms
        member.session = asyncio.get_running_loop().call_later(
            timeout / 1000, self._expired, group, member
        )

    def _expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Silent for the session timeout: presumed dead, its partitions freed."""
        if group.members.get(member.member_id) is member:
            self._remove(group, member)

    def _revocation_expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Kept partitions past its rebalance timeout: removed (it rejoins when it wakes)."""
        member.revocation = None
        if group.members.get(member.member_id) is member and member.revoking:
            self._remove(group, member)

    def _remove(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._stop(member, "session")
        self._stop(member, "revocation")
        if group.members.pop(member.member_id, None) is member:
            group.epoch += 1
            group.target.pop(member.member_id, None)
            classic = [m.classic is not None for m in group.members.values()]
            if member.classic is None and classic and all(classic) and self._downgrade:
                del self.groups[group.group_id]
                for other in group.members.values():
                    self._stop(other, "session")
                    self._stop(other, "revocation")
                self._downgrade(group)

    @staticmethod
    def _stop(member: ConsumerMember, timer: str) -> None:
        handle = getattr(member, timer)
        if handle is not None:
            handle.cancel()
            setattr(member, timer, None)

    async def aclose(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                self._stop(member, "session")
                self._stop(member, "revocation")


def _subscription(data: bytes) -> Any:
    try:
        return wire.decode_subscription(data)
    except ValueError as e:
        raise GroupError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, str(e)) from None


def _owned(subscription: Any) -> set[TopicPartition]:
    owned = getattr(subscription, "owned_partitions", None) or []
    return {(tp.topic, p) for tp in owned for p in tp.partitions}


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise GroupError(
            ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {pattern!r}: {e}"
        ) from None
