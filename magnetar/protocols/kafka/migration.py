"""Online upgrade and downgrade between classic and KIP-848 consumer groups, as Kafka 4 does.

- **Upgrade**: the first ``group.protocol=consumer`` member of a group whose members all speak
  the classic protocol turns it into a consumer group. Its classic members stay, with their
  partitions (decoded from their last SyncGroup assignment) and their generation as their
  epoch; from then on the coordinator assigns for them too (``ConsumerGroups.classic_*``):
  their heartbeats answer REBALANCE_IN_PROGRESS when they must give up or take partitions,
  and their JoinGroup/SyncGroup hand out what the coordinator decided. Only a stable classic
  group converts; during a classic rebalance the new member is told to retry.
- **Downgrade**: when the last consumer-protocol member of such a group leaves (or times
  out) and classic members remain, the group becomes classic again, keeping their
  partitions and starting a classic rebalance they take part in by rejoining.
"""

from __future__ import annotations

from magnetar.protocols.kafka import wire
from magnetar.protocols.kafka.consumer_groups import (
    ClassicState,
    ConsumerGroup,
    ConsumerGroups,
    ConsumerMember,
)
from magnetar.protocols.kafka.coordinator import Group, GroupCoordinator, GroupState, Member
from magnetar.protocols.kafka.errors import ErrorCode, GroupError


def upgrade(classic: GroupCoordinator, modern: ConsumerGroups, group_id: str) -> None:
    """Turn the classic group ``group_id`` (with members) into a consumer group."""
    group = classic.groups[group_id]
    if group.state is not GroupState.STABLE or group.protocol_type != "consumer":
        raise GroupError(
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            f"classic group {group_id} is {group.state.value} (protocol type "
            f"{group.protocol_type!r}): it converts once stable; retry",
        )
    converted = ConsumerGroup(group_id, epoch=group.generation, assignment_epoch=group.generation)
    for m in group.members.values():
        try:
            subscription = wire.decode_subscription(m.metadata(group.protocol))
        except ValueError as e:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"cannot convert: {e}") from None
        owned = wire.decode_assignment(m.assignment)
        converted.members[m.member_id] = ConsumerMember(
            m.member_id,
            m.client_id,
            m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            topic_names=set(subscription.topics),
            epoch=group.generation,
            owned=set(owned),
            classic=ClassicState(
                m.session_timeout_ms, group.protocol_type, m.protocols, frozenset(owned)
            ),
        )
        converted.target[m.member_id] = set(owned)
    classic.discard(group_id)
    modern.adopt(converted)


def downgrade(classic: GroupCoordinator, group: ConsumerGroup) -> None:
    """Turn ``group`` (only classic members left) back into a classic group that rebalances."""
    members = {}
    for cm in group.members.values():
        assert cm.classic is not None
        members[cm.member_id] = Member(
            cm.member_id,
            cm.client_id,
            cm.client_host,
            cm.classic.session_timeout_ms,
            cm.rebalance_timeout_ms,
            cm.classic.protocols,
            assignment=wire.encode_assignment(cm.owned),
        )
    common = set.intersection(*({n for n, _ in m.protocols} for m in members.values()))
    first = next(iter(members.values()))
    converted = Group(
        group.group_id,
        generation=group.epoch,
        protocol_type="consumer",
        protocol=next((n for n, _ in first.protocols if n in common), None),
        leader=first.member_id,
        members=members,
    )
    classic.adopt(converted)
