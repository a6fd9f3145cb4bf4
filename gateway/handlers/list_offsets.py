"""ListOffsets (2): earliest, latest, max timestamp, and by timestamp (from indexed timestamps)."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..log import max_timestamp_offset, offset_for_timestamp
from ..security.acl import Operation
from .base import check_leader_epoch, register, respond

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # v8+ (KIP-1005): all of a log is "local" here
LATEST_TIERED = -5  # v9+: nothing is tiered, as on a Kafka topic without remote storage
EARLIEST_PENDING_UPLOAD = -6  # v11+ (KIP-1023): none either, as there
READ_COMMITTED = 1  # v2+: latest is the last stable offset


def _partition(index: int, code: ErrorCode, offset: int = -1, timestamp: int = -1, epoch: int = -1) -> dict:
    return dict(partition_index=index, error_code=code, offset=offset, timestamp=timestamp, leader_epoch=epoch)


def _error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[
        dict(name=t.name, partitions=[_partition(p.partition_index, code) for p in t.partitions])
        for t in request.body.topics
    ]))


@register(ApiKey.LIST_OFFSETS, error=_error)
async def handle_list_offsets(ctx: RequestContext, request: Request):
    topics = []
    for topic in request.body.topics:
        partitions = []
        for part in topic.partitions:
            try:
                ctx.access.require_topic(Operation.DESCRIBE, topic.name)
                partition_log = await ctx.logs.get(topic.name, part.partition_index)
                check_leader_epoch(partition_log.epoch, getattr(part, "current_leader_epoch", None))
                partitions.append(await _lookup(partition_log, part.partition_index, part.timestamp,
                                                getattr(request.body, "isolation_level", 0) == READ_COMMITTED))
            except KafkaError as exc:
                partitions.append(_partition(part.partition_index, exc.code))
        topics.append(dict(name=topic.name, partitions=partitions))
    return respond(request, dict(topics=topics))


async def _lookup(partition_log, index: int, timestamp: int, committed_only: bool) -> dict:
    if timestamp == LATEST:
        latest = partition_log.last_stable_offset if committed_only else partition_log.high_watermark
        return _partition(index, ErrorCode.none, latest, -1, partition_log.epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return _partition(index, ErrorCode.none, partition_log.log_start_offset, -1, partition_log.epoch)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return _partition(index, ErrorCode.none, -1, -1, partition_log.epoch)
    if timestamp == MAX_TIMESTAMP:
        found = await max_timestamp_offset(partition_log)
    elif timestamp < 0:
        return _partition(index, ErrorCode.invalid_request)
    else:
        found = await offset_for_timestamp(partition_log, timestamp)
    if found is None:
        return _partition(index, ErrorCode.none, -1, -1, partition_log.epoch)  # no such record: Kafka's -1
    offset, stamp = found
    return _partition(index, ErrorCode.none, offset, stamp, partition_log.epoch)
