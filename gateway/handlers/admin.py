"""CreatePartitions (37), DeleteRecords (21), OffsetForLeaderEpoch (23),
DescribeCluster (60), DescribeLogDirs (35)."""

from __future__ import annotations

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..log import INTERNAL_TOPICS
from ..security.acl import Operation
from .base import check_leader_epoch, register, respond


def _create_partitions_error(request: Request, code: ErrorCode):
    return respond(request, dict(results=[dict(name=t.name, error_code=code, error_message=None)
                                          for t in request.body.topics]))


@register(ApiKey.CREATE_PARTITIONS, error=_create_partitions_error)
async def handle_create_partitions(ctx: RequestContext, request: Request):
    results = []
    for topic in request.body.topics:
        info = ctx.logs.topics().get(topic.name)
        if not ctx.access.allowed_topic(Operation.ALTER, topic.name):
            code, message = ErrorCode.topic_authorization_failed, "ALTER is not allowed"
        elif info is None:
            code, message = ErrorCode.unknown_topic_or_partition, f"unknown topic {topic.name!r}"
        elif topic.name in INTERNAL_TOPICS:  # its groups are placed by hashing over its partition count
            code, message = ErrorCode.invalid_request, f"{topic.name} is an internal topic: its partitions are fixed"
        elif topic.count <= info.partitions:
            code, message = ErrorCode.invalid_partitions, (
                f"topic {topic.name!r} has {info.partitions} partitions; the count can only grow")
        elif topic.assignments is not None and len(topic.assignments) != topic.count - info.partitions:
            code, message = ErrorCode.invalid_replica_assignment, "one assignment per new partition"
        else:
            code, message = ErrorCode.none, None
            try:
                ctx.logs.check_partition_count(topic.name, topic.count, info.partitions)
                if not request.body.validate_only:
                    await ctx.logs.add_partitions(topic.name, topic.count)
            except FAILURES as exc:
                code, message = code_of(exc), str(exc)
        results.append(dict(name=topic.name, error_code=code, error_message=message))
    return respond(request, dict(results=results))


def _delete_records_error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index, low_watermark=-1, error_code=code)
                                      for p in t.partitions]) for t in request.body.topics
    ]))


@register(ApiKey.DELETE_RECORDS, error=_delete_records_error)
async def handle_delete_records(ctx: RequestContext, request: Request):
    topics = []
    for topic in request.body.topics:
        rows = []
        for part in topic.partitions:
            try:
                ctx.access.require_topic(Operation.DELETE, topic.name)
                low = await ctx.logs.delete_records(topic.name, part.partition_index, part.offset)
                rows.append(dict(partition_index=part.partition_index, low_watermark=low, error_code=ErrorCode.none))
            except KafkaError as exc:
                rows.append(dict(partition_index=part.partition_index, low_watermark=-1, error_code=exc.code))
        topics.append(dict(name=topic.name, partitions=rows))
    return respond(request, dict(topics=topics))


def _epoch_error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[
        dict(topic=t.topic, partitions=[dict(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)
                                        for p in t.partitions]) for t in request.body.topics
    ]))


@register(ApiKey.OFFSET_FOR_LEADER_EPOCH, error=_epoch_error)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Request):
    topics = []
    for topic in request.body.topics:
        rows = []
        for part in topic.partitions:
            try:
                ctx.access.require_topic(Operation.DESCRIBE, topic.topic)
                partition_log = await ctx.logs.get(topic.topic, part.partition)
            except KafkaError as exc:
                rows.append(dict(error_code=exc.code, partition=part.partition, leader_epoch=-1, end_offset=-1))
                continue
            current = partition_log.epoch
            try:
                check_leader_epoch(current, part.current_leader_epoch)
                code = ErrorCode.none
            except KafkaError as exc:
                code = exc.code
            if code != ErrorCode.none or part.leader_epoch > current:
                rows.append(dict(error_code=code, partition=part.partition, leader_epoch=-1, end_offset=-1))
            else:
                # A new owner continues the same log; nothing is ever truncated, so every earlier
                # epoch "ends" at the high watermark and no consumer position is ever cut off.
                rows.append(dict(error_code=ErrorCode.none, partition=part.partition,
                                 leader_epoch=max(part.leader_epoch, 0), end_offset=partition_log.high_watermark))
        topics.append(dict(topic=topic.topic, partitions=rows))
    return respond(request, dict(topics=topics))


@register(ApiKey.DESCRIBE_CLUSTER, error=lambda request, code: respond(request, dict(
    error_code=code, error_message=None, cluster_id="", controller_id=-1, brokers=[])))
async def handle_describe_cluster(ctx: RequestContext, request: Request):
    # v2 (KIP-1073) may ask for fenced brokers too: a gateway is listed while it is a member,
    # and a member is never fenced (one that lost its lease is no longer listed).
    brokers = [dict(broker_id=b["node_id"], host=b["host"], port=b["port"], rack=None, is_fenced=False)
               for b in ctx.brokers()]
    values = dict(error_code=ErrorCode.none, error_message=None, endpoint_type=1, cluster_id=ctx.config.network.cluster_id,
                  controller_id=ctx.ownership.controller_id(), brokers=brokers)
    if request.body.include_cluster_authorized_operations:
        values["cluster_authorized_operations"] = ctx.access.cluster_authorized_operations()
    return respond(request, values)


@register(ApiKey.DESCRIBE_LOG_DIRS, error=lambda request, code: respond(request, dict(error_code=code, results=[])))
async def handle_describe_log_dirs(ctx: RequestContext, request: Request):
    ctx.access.require_cluster(Operation.DESCRIBE)
    known = ctx.logs.topics()
    if request.body.topics is None:
        wanted = [(name, list(range(info.partitions))) for name, info in sorted(known.items())]
    else:
        wanted = [(t.topic, list(t.partitions)) for t in request.body.topics if t.topic in known]
    topics = []
    for name, partitions in wanted:
        rows = []
        for partition in partitions:
            if partition % 1000 == 999:
                await trio.lowlevel.checkpoint()
            try:
                partition_log = await ctx.logs.get(name, partition)
            except KafkaError:
                continue
            rows.append(dict(partition_index=partition, partition_size=partition_log.size_bytes, offset_lag=0,
                             is_future_key=False))
        topics.append(dict(name=name, partitions=rows))
    return respond(request, dict(error_code=ErrorCode.none, results=[dict(
        error_code=ErrorCode.none, log_dir=ctx.logs.store.describe(), topics=topics, total_bytes=-1, usable_bytes=-1,
    )]))
