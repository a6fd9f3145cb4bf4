"""ShareFetch (78) and ShareAcknowledge (79): records acquired and acknowledged one by one
(KIP-932), within a member's share session.

A ShareFetch first applies the acknowledgements it carries, then acquires: from each
partition of the session, the next available records, up to the request's record and byte
limits, waiting up to ``max_wait`` for some to come (produced, given back, or their locks
ended). Epoch 0 opens a session, -1 closes it (what the member holds is given back).
"""

from __future__ import annotations

import uuid

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..log import PartitionLog
from ..security.acl import Operation
from ..shares.coordinator import OPEN_EPOCH, Fetched
from ..shares.partition import Acknowledgement
from ..shares.store import ShareKey
from .base import leader_hint, register, respond, wait_for_appends

PartitionId = tuple[uuid.UUID, int]


def _top_error(request: Request, code: ErrorCode, message: str | None = None):
    return respond(request, dict(error_code=code, error_message=message, acquisition_lock_timeout=0, responses=[],
                                 node_endpoints=[]))


class _Answer:
    """Per partition, what the response tells: fetch error, acknowledge error, records."""

    def __init__(self) -> None:
        self.fetch_errors: dict[PartitionId, tuple[ErrorCode, str | None]] = {}
        self.ack_errors: dict[PartitionId, tuple[ErrorCode, str | None]] = {}
        self.fetched: dict[PartitionId, Fetched] = {}
        self.leaders: dict[PartitionId, dict] = {}
        self.endpoints: dict[int, dict] = {}

    def fail(self, part: PartitionId, exc: BaseException, into: dict, ctx: RequestContext,
             name: str | None) -> None:
        code = code_of(exc)
        into[part] = (code, str(exc) or None)
        if code == ErrorCode.not_leader_or_follower and name is not None:
            leader, found = leader_hint(ctx, name, part[1])
            self.leaders[part] = leader
            self.endpoints.update((e["node_id"], e) for e in found)

    def body(self, told: list[PartitionId], lock_ms: int) -> dict:
        topics: dict[uuid.UUID, list[dict]] = {}
        for part in dict.fromkeys(told):
            fetched = self.fetched.get(part)
            fetch_code, fetch_message = self.fetch_errors.get(part, (ErrorCode.none, None))
            ack_code, ack_message = self.ack_errors.get(part, (ErrorCode.none, None))
            topics.setdefault(part[0], []).append(dict(
                partition_index=part[1], error_code=fetch_code, error_message=fetch_message,
                acknowledge_error_code=ack_code, acknowledge_error_message=ack_message,
                current_leader=self.leaders.get(part, dict(leader_id=-1, leader_epoch=-1)),
                records=b"".join(fetched.records) if fetched else b"",  # kio writes no null records
                acquired_records=[dict(first_offset=a.first, last_offset=a.last, delivery_count=a.deliveries)
                                  for a in fetched.acquired] if fetched else []))
        return dict(error_code=ErrorCode.none, error_message=None, acquisition_lock_timeout=lock_ms,
                    responses=[dict(topic_id=t, partitions=p) for t, p in topics.items()],
                    node_endpoints=[dict(node_id=e["node_id"], host=e["host"], port=e["port"], rack=e.get("rack"))
                                    for e in self.endpoints.values()])


async def _partition(ctx: RequestContext, group_id: str, part: PartitionId,
                     name: str | None) -> tuple[ShareKey, str, PartitionLog]:
    """The share-partition of ``part`` (its topic ``name``, None when no topic has its id)
    and its log, if this gateway may serve it."""
    if name is None:
        raise KafkaError(ErrorCode.unknown_topic_id, f"no topic with id {part[0]}")
    if not ctx.access.allowed_topic(Operation.READ, name):
        raise KafkaError(ErrorCode.topic_authorization_failed, f"READ on topic {name!r} is not allowed")
    return ShareKey(group_id, part[0], part[1]), name, await ctx.logs.get(name, part[1])


async def _acknowledge(ctx: RequestContext, group_id: str, member_id: str, topics, answer: _Answer) -> list[PartitionId]:
    """Apply each partition's acknowledgements; the partitions acknowledged."""
    acknowledged = []
    for topic in topics:
        for part in topic.partitions:
            if not part.acknowledgement_batches:
                continue
            key = (topic.topic_id, int(part.partition_index))
            acknowledged.append(key)
            batches = [Acknowledgement(int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
                       for b in part.acknowledgement_batches]
            name = ctx.logs.names_by_id().get(topic.topic_id)
            try:
                share, topic_name, partition_log = await _partition(ctx, group_id, key, name)
                await ctx.shares.acknowledge(share, topic_name, partition_log, member_id, batches)
            except FAILURES as exc:
                answer.fail(key, exc, answer.ack_errors, ctx, name)
    return acknowledged


def _check_ids(group_id: str | None, member_id: str | None) -> tuple[str, str]:
    if not group_id:
        raise KafkaError(ErrorCode.invalid_group_id, "a share request names its group")
    if not member_id:
        raise KafkaError(ErrorCode.unknown_member_id, "a share request names its member")
    return group_id, member_id


@register(ApiKey.SHARE_FETCH, error=_top_error)
async def handle_share_fetch(ctx: RequestContext, request: Request):
    body = request.body
    try:
        group_id, member_id = _check_ids(body.group_id, body.member_id)
        ctx.access.require_group(Operation.READ, group_id)
        if body.share_session_epoch == OPEN_EPOCH and any(
                p.acknowledgement_batches for t in body.topics for p in t.partitions):
            raise KafkaError(ErrorCode.invalid_request, "a share session's first fetch acknowledges nothing")
        share_session = ctx.shares.session_for(group_id, member_id, body.share_session_epoch, may_open=True)
    except KafkaError as exc:
        return _top_error(request, exc.code, str(exc))
    lock_ms = int(ctx.shares.limits(group_id).lock_s * 1000)
    answer = _Answer()
    told = await _acknowledge(ctx, group_id, member_id, body.topics, answer)
    if share_session is None:  # closing: acknowledged, then what the member holds is given back
        ctx.shares.close_session(group_id, member_id)
        return respond(request, answer.body(told, lock_ms))
    share_session.track([(t.topic_id, int(p.partition_index)) for t in body.topics for p in t.partitions],
                        [(t.topic_id, int(i)) for t in body.forgotten_topics_data for i in t.partitions])

    max_wait = max(to_millis(body.max_wait), 0) / 1000
    deadline = trio.current_time() + min(max_wait, ctx.config.limits.request_timeout_ms / 1000)
    limit_bytes = ctx.config.limits.fetch_max_bytes
    max_bytes = min(body.max_bytes, limit_bytes) if body.max_bytes > 0 else limit_bytes
    max_records = max(int(body.max_records), 1)
    while True:
        released = ctx.shares.released()  # taken before acquiring: a release meanwhile wakes us
        logs = await _acquire(ctx, group_id, member_id, share_session.in_turn(), max_records, max_bytes, answer)
        if answer.fetched or answer.fetch_errors or trio.current_time() >= deadline:
            break
        await wait_for_appends(logs, released, deadline)
    told += list(answer.fetched) + list(answer.fetch_errors)
    ctx.metrics.fetched_bytes.inc(sum(f.size for f in answer.fetched.values()))
    return respond(request, answer.body(told, lock_ms))


async def _acquire(ctx: RequestContext, group_id: str, member_id: str, parts: list[PartitionId], max_records: int,
                   max_bytes: int, answer: _Answer) -> list[PartitionLog]:
    """Acquire from each partition in turn until the limits are reached; the logs read."""
    logs = []
    records = size = 0
    memory = ctx.memory
    for part in parts:
        if records >= max_records or size >= max_bytes:
            break
        name = ctx.logs.names_by_id().get(part[0])
        try:
            key, topic_name, partition_log = await _partition(ctx, group_id, part, name)
            logs.append(partition_log)
            want = max_bytes - size if memory is None else min(max_bytes - size, max(memory.available(), 1))
            fetched = await ctx.shares.acquire(key, topic_name, partition_log, member_id, max_records - records, want)
        except FAILURES as exc:
            answer.fail(part, exc, answer.fetch_errors, ctx, name)
            continue
        if fetched.acquired:
            answer.fetched[part] = fetched
            records += sum(a.last - a.first + 1 for a in fetched.acquired)
            size += fetched.size
            if memory is not None:
                memory.charge(fetched.size)
    return logs


@register(ApiKey.SHARE_ACKNOWLEDGE, error=_top_error)
async def handle_share_acknowledge(ctx: RequestContext, request: Request):
    body = request.body
    try:
        group_id, member_id = _check_ids(body.group_id, body.member_id)
        ctx.access.require_group(Operation.READ, group_id)
        share_session = ctx.shares.session_for(group_id, member_id, body.share_session_epoch, may_open=False)
    except KafkaError as exc:
        return _top_error(request, exc.code, str(exc))
    answer = _Answer()
    told = await _acknowledge(ctx, group_id, member_id, body.topics, answer)
    if share_session is None:  # closing: acknowledged, then what the member holds is given back
        ctx.shares.close_session(group_id, member_id)
    full = answer.body(told, int(ctx.shares.limits(group_id).lock_s * 1000))
    for topic in full["responses"]:
        for part in topic["partitions"]:  # ShareAcknowledge answers only the acknowledgement's outcome
            part["error_code"], part["error_message"] = part.pop("acknowledge_error_code"), part.pop("acknowledge_error_message")
            del part["records"], part["acquired_records"]
    return respond(request, full)
