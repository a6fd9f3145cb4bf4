"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): the consumer group protocol (KIP-848).

Topics travel by id on the wire and by name in the coordinator: this module maps them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..groups.assignors import Assignment
from ..groups.consumer import ConsumerGroup, Heartbeat
from ..metadata import TopicInfo
from ..security.acl import Operation, ResourceType
from .base import register, respond


def _heartbeat_error(request: Request, code: ErrorCode, message: str | None = None):
    return respond(request, dict(error_code=code, error_message=message, member_id=None, member_epoch=-1,
                                 heartbeat_interval=0, assignment=None))


def _owned(request_partitions, names_by_id: dict[uuid.UUID, str]) -> Assignment | None:
    if request_partitions is None:
        return None
    owned: dict[str, frozenset[int]] = {}
    for entry in request_partitions:
        name = names_by_id.get(entry.topic_id)
        if name is not None:  # a deleted topic's partitions are simply no longer owned
            owned[name] = frozenset(int(p) for p in entry.partitions)
    return owned


def _by_id(assignment: Assignment, known: Mapping[str, TopicInfo]) -> list[dict]:
    return [dict(topic_id=known[topic].topic_id, partitions=sorted(partitions))
            for topic, partitions in sorted(assignment.items()) if topic in known and partitions]


def described_topics(ctx: RequestContext) -> Mapping[str, int]:
    """The topics a member may be assigned, and their partition counts: those its principal
    may describe, as in Kafka. Without an authorizer, the catalog's own map (built once per
    catalog, not per heartbeat: 634 µs a heartbeat at 1,000 topics)."""
    if ctx.access.sees_every_topic:
        return ctx.logs.partition_counts()
    return {name: info.partitions for name, info in ctx.logs.topics().items()
            if ctx.access.allowed_topic(Operation.DESCRIBE, name, quiet=True)}


@register(ApiKey.CONSUMER_GROUP_HEARTBEAT, error=_heartbeat_error)
async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Request):
    body = request.body
    ctx.access.require_group(Operation.READ, body.group_id)
    if ctx.shares.knows(body.group_id):
        return _heartbeat_error(request, ErrorCode.group_id_not_found, f"group {body.group_id!r} is a share group")
    known = ctx.logs.topics()
    names = body.subscribed_topic_names
    if names is not None:
        # As Kafka: a member may subscribe only to topics it may describe (the others are not matched).
        names = tuple(t for t in names if ctx.access.allowed_topic(Operation.DESCRIBE, t, quiet=True))
    topics = described_topics(ctx)
    member_id = body.member_id
    if not member_id and body.member_epoch == 0 and request.header.api_version == 0:
        member_id = str(uuid.uuid4())  # v0: the coordinator may make the id (v1: the client must, KIP-1082)
    beat = Heartbeat(
        member_id=member_id, member_epoch=body.member_epoch, instance_id=body.instance_id,
        rack_id=body.rack_id, rebalance_timeout_ms=to_millis(body.rebalance_timeout),
        subscribed_topic_names=names, subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),  # v1+
        server_assignor=body.server_assignor,
        owned=_owned(body.topic_partitions, ctx.logs.names_by_id()),
        client_id=request.header.client_id or "", client_host=ctx.peer_host,
    )
    try:
        answer = await ctx.groups.consumer_heartbeat(body.group_id, beat, topics)
    except KafkaError as exc:
        return _heartbeat_error(request, exc.code, str(exc))
    assignment = None
    if answer.assignment is not None:
        assignment = dict(topic_partitions=_by_id(answer.assignment, known))
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, member_id=answer.member_id,
                                 member_epoch=answer.member_epoch, heartbeat_interval=answer.heartbeat_interval_ms,
                                 assignment=assignment))


def _described_assignment(assignment: Assignment, known: Mapping[str, TopicInfo]) -> dict:
    return dict(topic_partitions=[dict(topic_id=known[topic].topic_id, topic_name=topic, partitions=sorted(partitions))
                                  for topic, partitions in sorted(assignment.items()) if topic in known])


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(groups=[
        dict(error_code=code, group_id=g, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
             members=[]) for g in request.body.group_ids]))


@register(ApiKey.CONSUMER_GROUP_DESCRIBE, error=_describe_error)
async def handle_consumer_group_describe(ctx: RequestContext, request: Request):
    known = ctx.logs.topics()
    described = []
    for group_id in request.body.group_ids:
        empty = dict(group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                     members=[])
        try:
            ctx.access.require_group(Operation.DESCRIBE, group_id)
            ctx.groups.check_coordinator(group_id)
        except KafkaError as exc:
            described.append(dict(empty, error_code=exc.code, error_message=str(exc)))
            continue
        group = ctx.groups.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            message = f"group {group_id!r} is not a consumer-protocol group" if group else None
            described.append(dict(empty, error_code=ErrorCode.group_id_not_found, error_message=message))
            continue
        members = [
            dict(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.epoch,
                 client_id=m.client_id, client_host=m.client_host,
                 subscribed_topic_names=sorted(m.subscribed_names), subscribed_topic_regex=m.subscribed_regex,
                 assignment=_described_assignment(m.assigned, known),
                 target_assignment=_described_assignment(group.target.get(m.member_id, {}), known),
                 member_type=1 if m.classic is None else 0)  # KIP-1099: 0 a classic member hosted here
            for m in group.members.values()
        ]
        entry = dict(error_code=ErrorCode.none, group_id=group_id, group_state=group.state.value,
                     group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                     assignor_name=group.assignor(), members=members)
        if request.body.include_authorized_operations:
            entry["authorized_operations"] = ctx.access.authorized_operations(ResourceType.GROUP, group_id)
        described.append(entry)
    return respond(request, dict(groups=described))
