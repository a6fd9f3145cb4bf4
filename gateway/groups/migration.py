"""KIP-848's online migration between the group protocols, as pure conversions.

A classic group becomes a consumer-protocol group when a consumer-protocol member joins it
while it is stable: each classic member carries on inside it as a member that speaks the
classic protocol, at the group's generation and with the partitions its last SyncGroup
gave it, so nothing moves until the new member's arrival changes the target assignment.
The group goes back to classic when its last consumer-protocol member leaves: its classic
members are asked to join again (a rebalance of the classic protocol, whose leader assigns).
Committed offsets stay with the group both ways.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kafscale.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment
from kafscale.protocol.errors import ErrorCode, KafkaError

from .assignors import pairs_of
from .classic import ClassicGroup, GroupState, Member
from .consumer import ClassicMetadata, ConsumerGroup, ConsumerMember
from .settings import GroupSettings

__all__ = ["upgraded", "downgraded"]

log = logging.getLogger("kafscale.groups")


def upgraded(group: ClassicGroup, settings: GroupSettings, topics: Mapping[str, int], now: float) -> ConsumerGroup:
    """The consumer-protocol group ``group`` becomes for a consumer-protocol member joining it;
    GROUP_ID_NOT_FOUND (Kafka's answer) when it cannot be converted now."""
    if group.state != GroupState.STABLE or group.protocol_type != ConsumerGroup.protocol_type:
        raise KafkaError(ErrorCode.group_id_not_found, f"group {group.group_id!r} is a classic group that cannot "
                         f"move to the consumer protocol now ({group.state.value}, protocol type "
                         f"{group.protocol_type!r}); it can once it is stable")
    consumer = ConsumerGroup(group.group_id, settings, group_epoch=group.generation,
                             assignment_epoch=group.generation, offsets=group.offsets)
    for member in group.members.values():
        try:
            subscription = decode_subscription(member.metadata_for(group.protocol_name))
            assigned = decode_assignment(member.assignment)
        except ValueError as exc:
            raise KafkaError(ErrorCode.group_id_not_found, f"group {group.group_id!r}: member {member.member_id}'s "
                             f"subscription or assignment is not the consumer protocol's ({exc})") from exc
        hosted = ConsumerMember(member.member_id, member.group_instance_id, subscription.rack, member.client_id,
                                member.client_host, member.rebalance_timeout_ms,
                                subscribed_names=frozenset(subscription.topics), epoch=group.generation,
                                classic=ClassicMetadata(member.session_timeout_ms, tuple(member.protocols)),
                                session_deadline=member.session_deadline())
        consumer.host(hosted, assigned)
    # The target is what the classic leader assigned: the joining member's arrival is the
    # first change.
    consumer.settle(topics)
    log.info("group %s: classic group of %d member(s) at generation %d moves to the consumer protocol",
             group.group_id, len(group.members), group.generation)
    return consumer


def downgraded(group: ConsumerGroup, now: float) -> ClassicGroup:
    """The classic group ``group`` becomes once only classic members are left in it: they keep
    their partitions until they join again, which a rebalance asks of them at once."""
    members = list(group.members.values())
    assert members and all(m.classic is not None for m in members), "only classic members convert back"
    protocols = [m.classic.protocols for m in members if m.classic is not None]
    common = set.intersection(*({name for name, _ in offered} for offered in protocols))
    if not common:
        raise KafkaError(ErrorCode.inconsistent_group_protocol,
                         f"group {group.group_id}: its classic members share no protocol")
    protocol_name = next(name for name, _ in protocols[0] if name in common)
    # The generation its members were told (the newest of their epochs): a heartbeat at it
    # is answered REBALANCE_IN_PROGRESS, so they join again.
    classic = ClassicGroup(group.group_id, group.settings, state=GroupState.STABLE,
                           generation=max(m.epoch for m in members), protocol_type=ConsumerGroup.protocol_type,
                           protocol_name=protocol_name, leader_id=members[0].member_id, offsets=group.offsets)
    for member in members:
        assert member.classic is not None
        classic.members[member.member_id] = Member(
            member.member_id, member.instance_id, member.client_id, member.client_host,
            member.classic.session_timeout_ms, member.rebalance_timeout_ms, ConsumerGroup.protocol_type,
            list(member.classic.protocols), assignment=encode_assignment(member.assigned),
            last_seen=member.session_deadline - member.classic.session_timeout_ms / 1000)
        if member.instance_id is not None:
            classic.static[member.instance_id] = member.member_id
    log.info("group %s: its last consumer-protocol member left; back to the classic protocol with %d member(s) "
             "holding %d partition(s)", group.group_id, len(members),
             sum(len(pairs_of(m.assigned)) for m in members))
    classic.begin_rebalance("the group moved back to the classic protocol", now)
    return classic
