"""Metadata (3): brokers, topics and partition leaders; auto-creates topics when allowed.

With ACLs, a principal sees only the topics it may DESCRIBE: asked for all topics, the
others are left out; named, they are TOPIC_AUTHORIZATION_FAILED (by id: UNKNOWN_TOPIC_ID,
so ids reveal nothing). Auto-creation needs CREATE on the cluster or the topic."""

from __future__ import annotations

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..log import INTERNAL_TOPICS
from ..security.acl import Operation, ResourceType
from .base import register, respond


def partition_entry(ctx: RequestContext, topic: str, partition: int) -> dict:
    leader = ctx.ownership.leader(topic, partition)
    if leader is None:  # between owners (a gateway left or joined): clients retry
        return dict(error_code=ErrorCode.leader_not_available, partition_index=partition, leader_id=-1,
                    leader_epoch=-1, replica_nodes=[], isr_nodes=[], offline_replicas=[])
    node_id, epoch = leader
    return dict(error_code=ErrorCode.none, partition_index=partition, leader_id=node_id, leader_epoch=epoch,
                replica_nodes=[node_id], isr_nodes=[node_id], offline_replicas=[])


async def _topic_entry(ctx: RequestContext, info) -> dict:
    partitions = []
    for partition in range(info.partitions):
        if partition % 1000 == 999:  # a large catalog must not hold the event loop
            await trio.lowlevel.checkpoint()
        partitions.append(partition_entry(ctx, info.name, partition))
    return dict(error_code=ErrorCode.none, name=info.name, topic_id=info.topic_id,
                is_internal=info.name in INTERNAL_TOPICS, partitions=partitions)


def _error_topic(request: Request, name, topic_id, code: ErrorCode) -> dict:
    if name is None and request.header.api_version < 12:
        name = ""  # requests may name no topic from v10, responses only from v12
    return dict(error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=[])


async def _response(ctx: RequestContext, request: Request, topics: list[dict]):
    values = dict(brokers=ctx.brokers(), cluster_id=ctx.config.network.cluster_id,
                  controller_id=ctx.ownership.controller_id(), topics=topics, error_code=ErrorCode.none)  # v13+
    if getattr(request.body, "include_topic_authorized_operations", False):
        for topic in topics:
            if topic["error_code"] == ErrorCode.none:
                topic["topic_authorized_operations"] = ctx.access.authorized_operations(ResourceType.TOPIC,
                                                                                        topic["name"])
    if getattr(request.body, "include_cluster_authorized_operations", False):  # v8-v10
        values["cluster_authorized_operations"] = ctx.access.cluster_authorized_operations()
    if sum(len(topic["partitions"]) for topic in topics) < 10_000:
        return respond(request, values)
    # Building (and then encoding) an answer over a large catalog takes a fraction of a
    # second of Python: in a worker thread, so other clients are served meanwhile.
    return await trio.to_thread.run_sync(respond, request, values)


def _error(request: Request, code: ErrorCode):
    requested = request.body.topics or ()
    topics = [_error_topic(request, getattr(t, "name", None), getattr(t, "topic_id", None), code) for t in requested]
    return respond(request, dict(brokers=[], cluster_id=None, controller_id=-1, topics=topics, error_code=code))


@register(ApiKey.METADATA, error=_error, large_answers=True)
async def handle_metadata(ctx: RequestContext, request: Request):
    body = request.body
    version = request.header.api_version
    requested = body.topics
    all_topics = requested is None or (version == 0 and not requested)
    known = ctx.logs.topics()
    may_describe = ctx.access.allowed_topic
    if all_topics:
        return await _response(ctx, request, [await _topic_entry(ctx, info)
                                              for info in sorted(known.values(), key=lambda i: i.name)
                                              if may_describe(Operation.DESCRIBE, info.name, quiet=True)])
    by_id = {info.topic_id: info for info in known.values()}
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    entries = []
    for wanted in requested:
        name = getattr(wanted, "name", None)
        topic_id = getattr(wanted, "topic_id", None)
        # By id whenever one is given, as Kafka does: the Java admin's describeTopics by id
        # sends the id with an empty name, not a null one.
        if topic_id is not None and topic_id.int != 0:
            info = by_id.get(topic_id)
            entries.append(await _topic_entry(ctx, info) if info and may_describe(Operation.DESCRIBE, info.name)
                           else _error_topic(request, None, topic_id, ErrorCode.unknown_topic_id))
            continue
        if name is None:  # neither a name nor an id
            entries.append(_error_topic(request, None, None, ErrorCode.invalid_topic_exception))
            continue
        if not may_describe(Operation.DESCRIBE, name):
            entries.append(_error_topic(request, name, None, ErrorCode.topic_authorization_failed))
            continue
        info = known.get(name)
        if info is None and allow_create and not ctx.access.may_create_topic(name):
            entries.append(_error_topic(request, name, None, ErrorCode.topic_authorization_failed))
            continue
        if info is None and allow_create:
            try:
                info = await ctx.logs.ensure_topic(name)
            except FAILURES as exc:
                entries.append(_error_topic(request, name, None, code_of(exc)))
                continue
        if info is None:
            entries.append(_error_topic(request, name, None, ErrorCode.unknown_topic_or_partition))
        else:
            entries.append(await _topic_entry(ctx, info))
    return await _response(ctx, request, entries)
