"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77): share-group membership (KIP-932).

Topics travel by id on the wire and by name in the coordinator: this module maps them.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES
from ..metadata import TopicInfo
from ..security.acl import Operation, ResourceType
from ..shares.group import Assignment, ShareBeat
from ..shares.store import ShareKey
from .base import register, respond
from .consumer_groups import described_topics

ASSIGNOR = "simple"  # Kafka's name for the share-group assignor


def _heartbeat_error(request: Request, code: ErrorCode, message: str | None = None):
    return respond(request, dict(error_code=code, error_message=message, member_id=None, member_epoch=-1,
                                 heartbeat_interval=0, assignment=None))


def check_share_group(ctx: RequestContext, group_id: str) -> None:
    """A group id names one kind of group: a classic or consumer group's is not a share group's."""
    if group_id in ctx.groups.groups:
        raise KafkaError(ErrorCode.group_id_not_found, f"group {group_id!r} is not a share group")


@register(ApiKey.SHARE_GROUP_HEARTBEAT, error=_heartbeat_error)
async def handle_share_group_heartbeat(ctx: RequestContext, request: Request):
    body = request.body
    ctx.access.require_group(Operation.READ, body.group_id)
    try:
        ctx.groups.check_coordinator(body.group_id)
        check_share_group(ctx, body.group_id)
        names = body.subscribed_topic_names
        if names is not None:
            # As Kafka: only topics the member may describe are subscribed to.
            names = tuple(t for t in names if ctx.access.allowed_topic(Operation.DESCRIBE, t, quiet=True))
        beat = ShareBeat(member_id=body.member_id, member_epoch=body.member_epoch, rack_id=body.rack_id,
                         subscribed=names, client_id=request.header.client_id or "", client_host=ctx.peer_host)
        answer = ctx.shares.heartbeat(body.group_id, beat, described_topics(ctx))
    except KafkaError as exc:
        return _heartbeat_error(request, exc.code, str(exc))
    known = ctx.logs.topics()
    assignment = None
    if answer.assignment is not None:
        await _start_states(ctx, body.group_id, answer.assignment, known)
        assignment = dict(topic_partitions=[dict(topic_id=known[t].topic_id, partitions=sorted(p))
                                            for t, p in sorted(answer.assignment.items()) if t in known])
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, member_id=answer.member_id,
                                 member_epoch=answer.member_epoch, heartbeat_interval=answer.heartbeat_interval_ms,
                                 assignment=assignment))


async def _start_states(ctx: RequestContext, group_id: str, assignment: Assignment,
                        known: Mapping[str, TopicInfo]) -> None:
    """The share-partitions a member is given start now, where share.auto.offset.reset says
    (as Kafka initializes them on assignment): records produced before the member's first
    fetch are its. Partitions owned elsewhere start at their owner's first fetch."""
    for topic, partitions in assignment.items():
        if topic not in known:
            continue
        for partition in partitions:
            if not ctx.ownership.owns(topic, partition):
                continue
            try:
                partition_log = await ctx.logs.get(topic, partition)
                await ctx.shares.hold(ShareKey(group_id, known[topic].topic_id, partition), topic, partition_log)
            except FAILURES:
                continue  # the first fetch tries again, and answers the error


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(groups=[
        dict(error_code=code, group_id=g, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
             members=[]) for g in request.body.group_ids]))


@register(ApiKey.SHARE_GROUP_DESCRIBE, error=_describe_error)
async def handle_share_group_describe(ctx: RequestContext, request: Request):
    known = ctx.logs.topics()
    described = []
    for group_id in request.body.group_ids:
        empty = dict(group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                     members=[])
        try:
            ctx.access.require_group(Operation.DESCRIBE, group_id)
            ctx.groups.check_coordinator(group_id)
            check_share_group(ctx, group_id)
        except KafkaError as exc:
            described.append(dict(empty, error_code=exc.code, error_message=str(exc)))
            continue
        group = ctx.shares.groups.get(group_id)
        if group is None and group_id not in ctx.shares.stored_groups:
            described.append(dict(empty, error_code=ErrorCode.group_id_not_found,
                                  error_message=f"no share group {group_id!r}"))
            continue
        members = [] if group is None else [
            dict(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch, client_id=m.client_id,
                 client_host=m.client_host, subscribed_topic_names=sorted(m.subscribed),
                 assignment=dict(topic_partitions=[
                     dict(topic_id=known[t].topic_id, topic_name=t, partitions=sorted(p))
                     for t, p in sorted(m.assigned.items()) if t in known]))
            for m in group.members.values()]
        entry = dict(error_code=ErrorCode.none, group_id=group_id, group_state="Empty" if group is None else group.state,
                     group_epoch=0 if group is None else group.group_epoch,
                     assignment_epoch=0 if group is None else group.assignment_epoch, assignor_name=ASSIGNOR,
                     members=members)
        if request.body.include_authorized_operations:
            entry["authorized_operations"] = ctx.access.authorized_operations(ResourceType.GROUP, group_id)
        described.append(entry)
    return respond(request, dict(groups=described))
