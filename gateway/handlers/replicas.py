"""ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46),
AlterReplicaLogDirs (34): answered as a Kafka cluster whose every partition has one
replica would answer them. Replication is the object store's job here, so there is
never an election to hold, a reassignment in progress or a second log directory;
admin tools that call these get Kafka's answers instead of a closed connection."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import Operation
from .base import register, respond

_NOT_REPLICATED = "each partition has one replica; the object store replicates the data"


def _partition_error(ctx: RequestContext, topic: str, partition: int) -> ErrorCode | None:
    """Why the partition cannot be addressed at all, or None."""
    info = ctx.logs.topics().get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.unknown_topic_or_partition
    return None


# -- ElectLeaders ------------------------------------------------------------------------------


def _elect_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, replica_election_results=[
        dict(topic=t.topic, partition_result=[dict(partition_id=p, error_code=code, error_message=None)
                                              for p in t.partitions])
        for t in request.body.topic_partitions or ()]))


@register(ApiKey.ELECT_LEADERS, error=_elect_error)
async def handle_elect_leaders(ctx: RequestContext, request: Request):
    ctx.access.require_cluster(Operation.ALTER)
    # With no partitions named, Kafka elects where an election is needed: nowhere here.
    results = []
    for wanted in request.body.topic_partitions or ():
        rows = []
        for partition in wanted.partitions:
            code, message = _partition_error(ctx, wanted.topic, partition), None
            if code is None and ctx.ownership.leader(wanted.topic, partition) is None:
                code = ErrorCode.eligible_leaders_not_available  # between owners in a cluster
            elif code is None:
                code, message = ErrorCode.election_not_needed, "the partition's only replica leads it"
            rows.append(dict(partition_id=partition, error_code=code, error_message=message))
        results.append(dict(topic=wanted.topic, partition_result=rows))
    return respond(request, dict(error_code=ErrorCode.none, replica_election_results=results))


# -- reassignments -----------------------------------------------------------------------------


@register(ApiKey.LIST_PARTITION_REASSIGNMENTS, error=lambda request, code: respond(
    request, dict(error_code=code, error_message=None, topics=[])))
async def handle_list_partition_reassignments(ctx: RequestContext, request: Request):
    ctx.access.require_cluster(Operation.DESCRIBE)
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, topics=[]))


def _alter_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, error_message=None, responses=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index, error_code=code, error_message=None)
                                      for p in t.partitions]) for t in request.body.topics]))


@register(ApiKey.ALTER_PARTITION_REASSIGNMENTS, error=_alter_error)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Request):
    ctx.access.require_cluster(Operation.ALTER)
    responses = []
    for topic in request.body.topics:
        rows = []
        for part in topic.partitions:
            code, message = _reassign(ctx, topic.name, part.partition_index, part.replicas)
            rows.append(dict(partition_index=part.partition_index, error_code=code, error_message=message))
        responses.append(dict(name=topic.name, partitions=rows))
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, responses=responses))


def _reassign(ctx: RequestContext, topic: str, partition: int, replicas) -> tuple[ErrorCode, str | None]:
    code = _partition_error(ctx, topic, partition)
    if code is not None:
        return code, None
    if replicas is None:  # cancel: nothing is ever in progress
        return ErrorCode.no_reassignment_in_progress, None
    leader = ctx.ownership.leader(topic, partition)
    if leader is not None and list(replicas) == [leader[0]]:
        return ErrorCode.none, None  # already so
    return ErrorCode.invalid_replica_assignment, f"replicas must be [leader]: {_NOT_REPLICATED}"


# -- AlterReplicaLogDirs -----------------------------------------------------------------------


def _log_dirs_error(request: Request, code: ErrorCode):
    return respond(request, dict(results=[
        dict(topic_name=t.name, partitions=[dict(partition_index=p, error_code=code) for p in t.partitions])
        for d in request.body.dirs for t in d.topics]))


@register(ApiKey.ALTER_REPLICA_LOG_DIRS, error=_log_dirs_error)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Request):
    ctx.access.require_cluster(Operation.ALTER)
    only_dir = ctx.logs.store.describe()  # what DescribeLogDirs reports as the one log dir
    results = []
    for log_dir in request.body.dirs:
        for topic in log_dir.topics:
            rows = []
            for partition in topic.partitions:
                code = _partition_error(ctx, topic.name, partition)
                if code is None:
                    code = ErrorCode.none if log_dir.path == only_dir else ErrorCode.log_dir_not_found
                rows.append(dict(partition_index=partition, error_code=code))
            results.append(dict(topic_name=topic.name, partitions=rows))
    return respond(request, dict(results=results))

