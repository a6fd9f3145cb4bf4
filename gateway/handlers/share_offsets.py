"""DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92):
a share group's start offsets per partition (KIP-932), as kafka-share-groups.sh and the
Java admin read and set them. Altering and deleting need a group with no members."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..security.acl import Operation
from ..shares.store import ShareKey
from .base import register, respond
from .share_groups import check_share_group


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(groups=[dict(group_id=g.group_id, topics=[], error_code=code)
                                         for g in request.body.groups]))


@register(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, error=_describe_error)
async def handle_describe_share_group_offsets(ctx: RequestContext, request: Request):
    known = ctx.logs.topics()
    names = ctx.logs.names_by_id()
    groups = []
    for wanted in request.body.groups:
        group_id = wanted.group_id
        try:
            ctx.access.require_group(Operation.DESCRIBE, group_id)
            ctx.groups.check_coordinator(group_id)
            check_share_group(ctx, group_id)
        except KafkaError as exc:
            groups.append(dict(group_id=group_id, topics=[], error_code=exc.code, error_message=str(exc)))
            continue
        if wanted.topics is None:  # every partition the group has state for
            asked: dict[str, list[int]] = {}
            for key in await ctx.shares.stored_keys(group_id):
                if key.topic_id in names:
                    asked.setdefault(names[key.topic_id], []).append(key.partition)
        else:
            asked = {t.topic_name: list(t.partitions) for t in wanted.topics}
        topics: list[dict] = []
        for topic, partitions in asked.items():
            if not ctx.access.allowed_topic(Operation.DESCRIBE, topic, quiet=True) or topic not in known:
                code = ErrorCode.unknown_topic_or_partition if topic not in known else ErrorCode.topic_authorization_failed
                topics.append(dict(topic_name=topic, topic_id=None, partitions=[
                    dict(partition_index=p, start_offset=-1, leader_epoch=-1, error_code=code) for p in partitions]))
                continue
            described = []
            for partition in partitions:
                entry: dict[str, object] = dict(partition_index=partition, start_offset=-1, leader_epoch=-1, lag=-1,
                                                error_code=ErrorCode.none)
                try:
                    state = await ctx.shares.start_of(ShareKey(group_id, known[topic].topic_id, partition))
                    if state is not None:
                        entry["start_offset"] = state[0]
                        if ctx.ownership.owns(topic, partition):
                            log = await ctx.logs.get(topic, partition)
                            entry["lag"] = max(log.high_watermark - state[0] - state[1], 0)
                except FAILURES as exc:
                    entry.update(error_code=code_of(exc), error_message=str(exc))
                described.append(entry)
            topics.append(dict(topic_name=topic, topic_id=known[topic].topic_id, partitions=described))
        groups.append(dict(group_id=group_id, topics=topics, error_code=ErrorCode.none))
    return respond(request, dict(groups=groups))


def _alter_error(request: Request, code: ErrorCode, message: str | None = None):
    return respond(request, dict(error_code=code, error_message=message, responses=[]))


def _group_checks(ctx: RequestContext, group_id: str, operation: Operation) -> None:
    """What altering a share group's offsets needs: the right, its coordinator, no members."""
    ctx.access.require_group(operation, group_id)
    ctx.groups.check_coordinator(group_id)
    check_share_group(ctx, group_id)
    ctx.shares.require_empty(group_id)


@register(ApiKey.ALTER_SHARE_GROUP_OFFSETS, error=_alter_error)
async def handle_alter_share_group_offsets(ctx: RequestContext, request: Request):
    body = request.body
    try:
        _group_checks(ctx, body.group_id, Operation.READ)
    except KafkaError as exc:
        return _alter_error(request, exc.code, str(exc))
    known = ctx.logs.topics()
    responses = []
    for topic in body.topics:
        info = known.get(topic.topic_name)
        results = []
        for part in topic.partitions:
            result = dict(partition_index=part.partition_index, error_code=ErrorCode.none)
            try:
                if not ctx.access.allowed_topic(Operation.READ, topic.topic_name):
                    raise KafkaError(ErrorCode.topic_authorization_failed, "READ on the topic is not allowed")
                if info is None or not 0 <= part.partition_index < info.partitions:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no partition {topic.topic_name}-"
                                                                           f"{part.partition_index}")
                if part.start_offset < 0:
                    raise KafkaError(ErrorCode.invalid_request, "a start offset is not negative")
                await ctx.shares.reset(ShareKey(body.group_id, info.topic_id, int(part.partition_index)),
                                       topic.topic_name, int(part.start_offset))
            except FAILURES as exc:
                result.update(error_code=code_of(exc), error_message=str(exc))
            results.append(result)
        responses.append(dict(topic_name=topic.topic_name, topic_id=None if info is None else info.topic_id,
                              partitions=results))
    return respond(request, dict(error_code=ErrorCode.none, responses=responses))


@register(ApiKey.DELETE_SHARE_GROUP_OFFSETS, error=_alter_error)
async def handle_delete_share_group_offsets(ctx: RequestContext, request: Request):
    body = request.body
    try:
        _group_checks(ctx, body.group_id, Operation.DELETE)
    except KafkaError as exc:
        return _alter_error(request, exc.code, str(exc))
    known = ctx.logs.topics()
    responses = []
    for topic in body.topics:
        info = known.get(topic.topic_name)
        result = dict(topic_name=topic.topic_name, topic_id=None if info is None else info.topic_id,
                      error_code=ErrorCode.none)
        try:
            if not ctx.access.allowed_topic(Operation.READ, topic.topic_name):
                raise KafkaError(ErrorCode.topic_authorization_failed, "READ on the topic is not allowed")
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {topic.topic_name!r}")
            await ctx.shares.delete_topic_state(body.group_id, info.topic_id)
        except FAILURES as exc:
            result.update(error_code=code_of(exc), error_message=str(exc))
        responses.append(result)
    return respond(request, dict(error_code=ErrorCode.none, responses=responses))
