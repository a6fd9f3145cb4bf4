"""DescribeTopicPartitions (75, KIP-966): a topic's partitions without Metadata's brokers,
paginated: at most ``response_partition_limit`` partitions an answer (and never more than
Kafka's ``max.request.partition.size.limit`` of 2,000), the rest from the cursor it names.
The Java admin (3.8+) describes topics by name with it."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode

from ..context import RequestContext
from ..log import INTERNAL_TOPICS
from ..security.acl import Operation, ResourceType
from .base import register, respond
from .metadata import partition_entry

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit


def _error(request, code: ErrorCode):
    return respond(request, dict(topics=[dict(error_code=code, name=t.name, topic_id=None, partitions=[])
                                         for t in request.body.topics], next_cursor=None))


@register(ApiKey.DESCRIBE_TOPIC_PARTITIONS, error=_error)
async def handle_describe_topic_partitions(ctx: RequestContext, request):
    body = request.body
    known = ctx.logs.topics()
    if body.topics:
        names = sorted({t.name for t in body.topics})
    else:  # every topic the principal may describe
        names = sorted(n for n in known if ctx.access.allowed_topic(Operation.DESCRIBE, n, quiet=True))
    cursor = body.cursor
    if cursor is not None:
        if cursor.topic_name not in names or cursor.partition_index < 0:
            return _error(request, ErrorCode.invalid_request)
        names = names[names.index(cursor.topic_name):]
    room = min(body.response_partition_limit, MAX_PARTITIONS) if body.response_partition_limit > 0 else MAX_PARTITIONS
    topics: list[dict] = []
    next_cursor = None
    for name in names:
        info = known.get(name)
        if not ctx.access.allowed_topic(Operation.DESCRIBE, name, quiet=bool(not body.topics)):
            topics.append(dict(error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=None, partitions=[]))
            continue
        if info is None:
            topics.append(dict(error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=None,
                               partitions=[]))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if room == 0:
            next_cursor = dict(topic_name=name, partition_index=first)
            break
        last = min(info.partitions, first + room)
        topics.append(dict(error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
                           is_internal=name in INTERNAL_TOPICS,
                           partitions=[dict(partition_entry(ctx, name, p), eligible_leader_replicas=[],
                                            last_known_elr=[]) for p in range(first, last)],  # no ELR (KIP-966) here
                           topic_authorized_operations=ctx.access.authorized_operations(ResourceType.TOPIC, name)))
        room -= last - first
        if last < info.partitions:
            next_cursor = dict(topic_name=name, partition_index=last)
            break
    return respond(request, dict(topics=topics, next_cursor=next_cursor))
