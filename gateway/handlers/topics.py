"""CreateTopics (19) and DeleteTopics (20)."""

from __future__ import annotations

import logging

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..log import INTERNAL_TOPICS
from ..security.acl import Operation
from ..topic_configs import validate_topic_configs
from .base import register, respond

log = logging.getLogger("kafscale.handlers.topics")


def _create_entry(name, code: ErrorCode, message: str | None = None, info=None) -> dict:
    return dict(
        name=name, topic_id=info.topic_id if info else None, error_code=code, error_message=message,
        num_partitions=info.partitions if info else -1, replication_factor=1 if info else -1,
        configs=[dict(name=k, value=v, read_only=False, config_source=1, is_sensitive=False)
                 for k, v in sorted(info.configs.items())] if info else [],
    )


def _create_error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[_create_entry(t.name, code) for t in request.body.topics]))


@register(ApiKey.CREATE_TOPICS, error=_create_error)
async def handle_create_topics(ctx: RequestContext, request: Request):
    body = request.body
    results = []
    seen: set[str] = set()
    for topic in body.topics:
        if topic.name in seen:
            results.append(_create_entry(topic.name, ErrorCode.invalid_request, "topic listed twice"))
            continue
        seen.add(topic.name)
        results.append(await _create_one(ctx, topic, body.validate_only if hasattr(body, "validate_only") else False))
    return respond(request, dict(topics=results))


async def _create_one(ctx: RequestContext, topic, validate_only: bool) -> dict:
    name = topic.name
    if not ctx.access.may_create_topic(name):
        return _create_entry(name, ErrorCode.topic_authorization_failed, "CREATE is not allowed")
    partitions = topic.num_partitions
    if partitions == -1:
        partitions = ctx.config.topics.default_partitions
    if topic.assignments:
        if topic.num_partitions != -1:
            return _create_entry(name, ErrorCode.invalid_request, "give either partitions or assignments")
        partitions = len(topic.assignments)
    if topic.replication_factor not in (-1, 1) and topic.replication_factor < 1:
        return _create_entry(name, ErrorCode.invalid_replication_factor, "replication factor must be positive")
    configs = {item.name: item.value for item in topic.configs if item.value is not None}
    try:
        validate_topic_configs({item.name: item.value for item in topic.configs})
    except KafkaError as exc:
        return _create_entry(name, exc.code, str(exc))
    if name in ctx.logs.metadata.topics():  # also a topic not served for its size
        return _create_entry(name, ErrorCode.topic_already_exists, f"topic {name!r} already exists")
    try:
        ctx.logs.check_new_topic(name, partitions)
        if validate_only:
            return _create_entry(name, ErrorCode.none)
        info = await ctx.logs.create_topic(name, partitions, configs)
    except FAILURES as exc:
        return _create_entry(name, code_of(exc), str(exc))
    # Replication is the object store's job; we report a factor of 1.
    return _create_entry(name, ErrorCode.none, None, info)


def _delete_targets(request: Request) -> list[tuple[str | None, object]]:
    body = request.body
    if hasattr(body, "topic_names"):
        return [(name, None) for name in body.topic_names]
    return [(t.name, t.topic_id) for t in body.topics]


def _delete_error(request: Request, code: ErrorCode):
    return respond(request, dict(responses=[
        dict(name=name, topic_id=topic_id, error_code=code) for name, topic_id in _delete_targets(request)
    ]))


@register(ApiKey.DELETE_TOPICS, error=_delete_error)
async def handle_delete_topics(ctx: RequestContext, request: Request):
    responses = []
    for name, topic_id in _delete_targets(request):
        topics = ctx.logs.metadata.topics()  # a topic not served for its size can still be deleted
        if name is None and topic_id is not None:
            name = next((n for n, info in topics.items() if info.topic_id == topic_id), None)
            if name is None:
                responses.append(dict(name=None, topic_id=topic_id, error_code=ErrorCode.unknown_topic_id))
                continue
        if name is None:  # neither a name nor an id
            responses.append(dict(name=None, topic_id=topic_id, error_code=ErrorCode.invalid_request,
                                  error_message="a topic to delete needs a name or an id"))
            continue
        if not ctx.access.allowed_topic(Operation.DELETE, name):
            responses.append(dict(name=name, topic_id=topic_id, error_code=ErrorCode.topic_authorization_failed,
                                  error_message="DELETE is not allowed"))
            continue
        info = topics.get(name)
        if info is None:
            responses.append(dict(name=name, topic_id=topic_id, error_code=ErrorCode.unknown_topic_or_partition,
                                  error_message=f"unknown topic {name!r}"))
            continue
        if name in INTERNAL_TOPICS:
            responses.append(dict(name=name, topic_id=info.topic_id, error_code=ErrorCode.invalid_request,
                                  error_message=f"{name} is one of Kafka's internal topics: it cannot be deleted"))
            continue
        await ctx.logs.delete_topic(name)
        await ctx.groups.forget_topic(name)
        await ctx.shares.forget_topic(info.topic_id)
        responses.append(dict(name=name, topic_id=info.topic_id, error_code=ErrorCode.none))
    return respond(request, dict(responses=responses))
