"""OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from __future__ import annotations

import struct

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..groups.consumer import ConsumerGroup
from ..groups.store import CommittedOffset
from ..security.acl import Operation
from .base import register, respond


def _topic_named(topic, names_by_id) -> str | None:
    """The topic's name: given (v0-9), or found by its id (v10+, Kafka 4.1); ``None``: no such id."""
    name = getattr(topic, "name", None)
    return name if name is not None else names_by_id().get(topic.topic_id)


def _commit_error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[
        dict(name=getattr(t, "name", None), topic_id=getattr(t, "topic_id", None),
             partitions=[dict(partition_index=p.partition_index, error_code=code) for p in t.partitions])
        for t in request.body.topics
    ]))


@register(ApiKey.OFFSET_COMMIT, error=_commit_error)
async def handle_offset_commit(ctx: RequestContext, request: Request):
    body = request.body
    if not ctx.access.allowed_group(Operation.READ, body.group_id):
        return _commit_error(request, ErrorCode.group_authorization_failed)
    try:
        group = ctx.groups.check_commit(body.group_id, body.member_id, body.generation_id_or_member_epoch,
                                        getattr(body, "group_instance_id", None))
    except KafkaError as exc:
        return _commit_error(request, exc.code)
    topics = ctx.logs.topics()
    accepted = {}
    results = []
    stamp = ctx.clock.now_ms()
    names_by_id = ctx.logs.names_by_id
    for topic in body.topics:
        partitions = []
        name = _topic_named(topic, names_by_id)
        info = topics.get(name) if name is not None else None
        readable = name is not None and ctx.access.allowed_topic(Operation.READ, name)
        for part in topic.partitions:
            metadata = part.committed_metadata
            if name is None:
                code = ErrorCode.unknown_topic_id
            elif not readable:
                code = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= part.partition_index < info.partitions:
                code = ErrorCode.unknown_topic_or_partition
            elif metadata is not None and len(metadata.encode()) > ctx.groups.settings.max_metadata_bytes:
                code = ErrorCode.offset_metadata_too_large
            else:
                code = ErrorCode.none
                accepted[(name, part.partition_index)] = CommittedOffset(
                    part.committed_offset, getattr(part, "committed_leader_epoch", -1), metadata, stamp)
            partitions.append(dict(partition_index=part.partition_index, error_code=code))
        results.append(dict(name=name, topic_id=getattr(topic, "topic_id", None), partitions=partitions))
    if accepted:
        await ctx.groups.commit(group, accepted)
    return respond(request, dict(topics=results))


async def _fetch_topics(ctx: RequestContext, group_id: str, requested, require_stable: bool,
                        by_id: bool = False) -> list[dict]:
    ctx.access.require_group(Operation.DESCRIBE, group_id)
    committed = ctx.groups.committed(group_id)
    known = ctx.logs.topics()
    ids = {name: info.topic_id for name, info in known.items()}
    # v7+ (KIP-447): offsets a transaction will still commit are not answered yet.
    unstable = await ctx.transactions.pending_offsets(group_id) if require_stable else set()
    may_describe = ctx.access.allowed_topic
    if requested is None:  # every committed offset of the group (of topics the principal may see)
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            if may_describe(Operation.DESCRIBE, topic, quiet=True):
                wanted.setdefault(topic, []).append(partition)
        requested_pairs = list(wanted.items())
    else:
        requested_pairs = [(_topic_named(t, ctx.logs.names_by_id) or "", list(t.partition_indexes))
                           for t in requested]
        if by_id:
            unknown = [t for t, (name, _) in zip(requested, requested_pairs, strict=True) if not name]
            requested_pairs = [pair for pair in requested_pairs if pair[0]]
    topics = []
    if requested is not None and by_id:
        topics += [dict(topic_id=t.topic_id, partitions=[
            dict(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                 error_code=ErrorCode.unknown_topic_id) for p in t.partition_indexes]) for t in unknown]
    for name, partitions in requested_pairs:
        rows = []
        if not may_describe(Operation.DESCRIBE, name):
            topics.append(dict(name=name, topic_id=ids.get(name), partitions=[
                dict(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                     error_code=ErrorCode.topic_authorization_failed) for p in partitions]))
            continue
        for partition in partitions:
            if (name, partition) in unstable:
                rows.append(dict(partition_index=partition, committed_offset=-1, committed_leader_epoch=-1,
                                 metadata="", error_code=ErrorCode.unstable_offset_commit))
                continue
            item = committed.get((name, partition))
            # Nothing committed is -1 (never 0): clients then apply auto.offset.reset.
            rows.append(dict(partition_index=partition, committed_offset=item.offset if item else -1,
                             committed_leader_epoch=item.leader_epoch if item else -1,
                             metadata=(item.metadata if item else "") or "", error_code=ErrorCode.none))
        topics.append(dict(name=name, topic_id=ids.get(name), partitions=rows))
    return topics


def _fetch_error(request: Request, code: ErrorCode):
    body = request.body
    if hasattr(body, "groups"):
        return respond(request, dict(groups=[dict(group_id=g.group_id, topics=[], error_code=code) for g in body.groups]))
    if request.header.api_version < 2:
        # No top-level error before v2: as Kafka, every requested partition carries it, with
        # offset -1 (an empty answer would read as "nothing committed").
        return respond(request, dict(topics=[dict(name=t.name, partitions=[
            dict(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=code)
            for p in t.partition_indexes]) for t in body.topics or ()]))
    return respond(request, dict(topics=[], error_code=code))


@register(ApiKey.OFFSET_FETCH, error=_fetch_error)
async def handle_offset_fetch(ctx: RequestContext, request: Request):
    body = request.body
    require_stable = getattr(body, "require_stable", False)
    if hasattr(body, "groups"):  # v8+: several groups at once, each with its own error
        groups = []
        for g in body.groups:
            try:
                # v9+ (KIP-848): a consumer-protocol member's fetch carries its epoch.
                ctx.groups.check_fetch(g.group_id, getattr(g, "member_id", None) or "", getattr(g, "member_epoch", -1))
                groups.append(dict(group_id=g.group_id, error_code=ErrorCode.none,
                                   topics=await _fetch_topics(ctx, g.group_id, g.topics, require_stable,
                                                              by_id=request.header.api_version >= 10)))
            except KafkaError as exc:
                groups.append(dict(group_id=g.group_id, topics=[], error_code=exc.code))
        return respond(request, dict(groups=groups))
    try:
        topics = await _fetch_topics(ctx, body.group_id, body.topics, require_stable)
    except KafkaError as exc:
        return _fetch_error(request, exc.code)
    return respond(request, dict(topics=topics, error_code=ErrorCode.none))


def _subscribed_topics(metadata: bytes) -> set[str]:
    """Topics of a consumer-protocol subscription (version, then an array of strings)."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, set()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            topics.add(metadata[pos + 2: pos + 2 + size].decode())
            pos += 2 + size
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()


def _delete_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, topics=[]))


@register(ApiKey.OFFSET_DELETE, error=_delete_error)
async def handle_offset_delete(ctx: RequestContext, request: Request):
    body = request.body
    ctx.access.require_group(Operation.DELETE, body.group_id)
    ctx.groups.check_coordinator(body.group_id)
    group = ctx.groups.groups.get(body.group_id)
    if group is None:
        return _delete_error(request, ErrorCode.group_id_not_found)
    subscribed: set[str] = set()
    if isinstance(group, ConsumerGroup):
        subscribed = set(group.subscribed) if group.members else set()
    elif group.protocol_type == "consumer":
        for member in group.members.values():
            subscribed |= _subscribed_topics(member.metadata_for(group.protocol_name))
    elif group.members:
        return _delete_error(request, ErrorCode.non_empty_group)
    deleted, topics = [], []
    for topic in body.topics:
        rows = []
        readable = ctx.access.allowed_topic(Operation.READ, topic.name)
        for part in topic.partitions:
            if not readable:
                code = ErrorCode.topic_authorization_failed
            elif topic.name in subscribed:
                code = ErrorCode.group_subscribed_to_topic
            else:
                code = ErrorCode.none
                deleted.append((topic.name, part.partition_index))
            rows.append(dict(partition_index=part.partition_index, error_code=code))
        topics.append(dict(name=topic.name, partitions=rows))
    if deleted:
        await ctx.groups.delete_offsets(group, deleted)
    return respond(request, dict(error_code=ErrorCode.none, topics=topics))
