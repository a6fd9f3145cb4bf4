"""Fetch (1): byte-exact stored batches, with max_wait/min_bytes honoured across all
partitions of the request in one wait that wakes when any of them gets new data.

An answer is capped by the request's max_bytes and the gateway's fetch_max_bytes
(the first batch is served even if larger, as Kafka does), and by the memory
budget: what a partition may add is reserved from the connection's account before
it is read, so many large fetches at once (or one client pipelining them) get
less, or nothing until memory frees, instead of exhausting it.

Incremental fetch sessions (KIP-227, ``gateway/fetch_sessions.py``): a Fetch of a session
names only the partitions whose position changed; the session supplies the rest, and the
answer lists only partitions with something new.
"""

from __future__ import annotations

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.fetch_response import FetchAnswer, FetchPartition, FetchTopic
from kafscale.protocol.messages import Request
from kafscale.protocol.response_fields import Endpoint

from ..budget import RequestMemory
from ..context import RequestContext
from ..fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, FetchSession, SessionPartition
from ..security.acl import Operation
from .base import check_leader_epoch, leader_hint, register, wait_for_appends


def _targets(ctx: RequestContext, request: Request):
    """(topic name or None, topic id, the topic's requested partitions) for each requested topic."""
    by_id = ctx.logs.names_by_id()
    for topic in request.body.topics:
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "topic", None)
        if name is None and topic_id is not None:
            name = by_id.get(topic_id)
        yield name, topic_id, list(topic.partitions)


class _Wanted:
    """A session partition asked for again, with the attributes of a requested one."""

    __slots__ = ("partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch")

    def __init__(self, partition: int, kept: SessionPartition) -> None:
        self.partition = partition
        self.fetch_offset = kept.fetch_offset
        self.partition_max_bytes = kept.partition_max_bytes
        self.current_leader_epoch = kept.current_leader_epoch


def _forgotten(ctx: RequestContext, request: Request) -> list[tuple[str, int]]:
    by_id = ctx.logs.names_by_id()
    keys = []
    for topic in getattr(request.body, "forgotten_topics_data", None) or ():
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "topic", None) or (by_id.get(topic_id) if topic_id is not None else None)
        keys += [(name, int(p)) for p in topic.partitions] if name else []
    return keys


def _session_targets(ctx: RequestContext, request: Request, fetch_session: FetchSession) -> list:
    """The session's partitions after this request's changes and forgotten ones, as targets;
    partitions whose topic id is unknown are answered, not kept."""
    unknown = []
    for name, topic_id, parts in _targets(ctx, request):
        if name is None:
            unknown.append((name, topic_id, parts))
            continue
        for part in parts:
            key = (name, part.partition)
            told = fetch_session.partitions[key].told if key in fetch_session.partitions else None
            fetch_session.partitions[key] = SessionPartition(
                topic_id, part.fetch_offset, part.partition_max_bytes, getattr(part, "current_leader_epoch", -1), told)
    for key in _forgotten(ctx, request):
        fetch_session.partitions.pop(key, None)
    grouped: dict[str, tuple] = {}
    for (name, partition), kept in fetch_session.partitions.items():
        grouped.setdefault(name, (name, kept.topic_id, []))[2].append(_Wanted(partition, kept))
    return unknown + list(grouped.values())


READ_COMMITTED = 1


def _error(request: Request, code: ErrorCode) -> FetchAnswer:
    return FetchAnswer([FetchTopic(getattr(t, "topic", None), getattr(t, "topic_id", None),
                                   [FetchPartition(p.partition, code) for p in t.partitions])
                        for t in request.body.topics])


def _session_of(ctx: RequestContext, request: Request) -> tuple[FetchSession | None, bool]:
    """The request's fetch session, and whether the answer lists only what changed."""
    body = request.body
    session_id, epoch = getattr(body, "session_id", 0), getattr(body, "session_epoch", FINAL_EPOCH)
    sessions, principal, now = ctx.gateway.fetch_sessions, ctx.session.principal, trio.current_time()
    if session_id == 0:
        if epoch == INITIAL_EPOCH:  # a new session, answered in full
            return sessions.open(principal, now), False
        if epoch != FINAL_EPOCH:
            raise KafkaError(ErrorCode.invalid_fetch_session_epoch, f"epoch {epoch} without a session")
        return None, False
    if epoch == FINAL_EPOCH:  # the client closes its session and fetches in full without one
        sessions.close(session_id, principal)
        return None, False
    return sessions.resume(session_id, epoch, principal, now), True


@register(ApiKey.FETCH, error=_error)
async def handle_fetch(ctx: RequestContext, request: Request):
    body = request.body
    try:
        fetch_session, incremental = _session_of(ctx, request)
    except KafkaError as exc:  # a top-level error, no partitions: the client starts a new session
        return FetchAnswer([], error_code=exc.code, session_id=getattr(body, "session_id", 0))
    max_wait = max(to_millis(body.max_wait), 0) / 1000
    deadline = trio.current_time() + min(max_wait, ctx.config.limits.request_timeout_ms / 1000)
    max_bytes = min(body.max_bytes, ctx.config.limits.fetch_max_bytes) if body.max_bytes > 0 else ctx.config.limits.fetch_max_bytes
    min_bytes = max(body.min_bytes, 0)
    if incremental:
        assert fetch_session is not None
        ctx.metrics.incremental_fetches.inc()
        targets = _session_targets(ctx, request, fetch_session)
    else:
        targets = list(_targets(ctx, request))
        if fetch_session is not None:
            _session_targets(ctx, request, fetch_session)
    memory = ctx.memory
    # read_committed: nothing at or past the last stable offset, and the aborted transactions
    # of what is returned, whose records the client drops.
    committed_only = getattr(body, "isolation_level", 0) == READ_COMMITTED

    while True:
        topics, total, errors, logs, endpoints = await _collect(ctx, targets, max_bytes, memory, committed_only)
        if total >= min_bytes or errors or trio.current_time() >= deadline:
            break
        if memory is not None:
            memory.refund(total)  # this answer is dropped; the next collection charges again
        await wait_for_appends(logs, trio.Event(), deadline)
    ctx.metrics.fetched_bytes.inc(total)
    if fetch_session is None:
        return FetchAnswer(topics, node_endpoints=endpoints)
    return FetchAnswer(_tell(fetch_session, topics, incremental), session_id=fetch_session.session_id,
                       node_endpoints=endpoints)


def _tell(fetch_session: FetchSession, topics: list[FetchTopic], incremental: bool) -> list[FetchTopic]:
    """What the session's client is told: every partition of a full answer; of an incremental
    one, those with records or with a changed watermark, log start or error (always errors)."""
    told = []
    for topic in topics:
        listed = []
        for part in topic.partitions:
            key = (topic.name or "", part.index)
            if key not in fetch_session.partitions:  # an unknown topic id, answered once
                listed.append(part)
                continue
            state = (part.high_watermark, part.last_stable_offset, part.log_start_offset, part.error_code)
            if fetch_session.changed(key, state, bool(part.records) or part.error_code != 0) or not incremental:
                listed.append(part)
        if listed:
            told.append(FetchTopic(topic.name, topic.topic_id, listed))
    return told


async def _collect(ctx: RequestContext, targets, max_bytes: int, memory: RequestMemory | None,
                   committed_only: bool):
    topics = []
    total = 0
    errors = False
    logs = []
    endpoints: dict[int, Endpoint] = {}  # leaders named in NOT_LEADER_OR_FOLLOWER answers (Fetch v16+)
    for name, topic_id, parts in targets:
        partitions = []
        for part in parts:
            if name is None:
                partitions.append(FetchPartition(part.partition, ErrorCode.unknown_topic_id))
                errors = True
                continue
            if not ctx.access.allowed_topic(Operation.READ, name):
                partitions.append(FetchPartition(part.partition, ErrorCode.topic_authorization_failed))
                errors = True
                continue
            try:
                partition_log = await ctx.logs.get(name, part.partition)
                check_leader_epoch(partition_log.epoch, getattr(part, "current_leader_epoch", None))
            except KafkaError as exc:
                entry = FetchPartition(part.partition, exc.code)
                if exc.code == ErrorCode.not_leader_or_follower:
                    leader, found = leader_hint(ctx, name, part.partition)
                    entry.current_leader = (leader["leader_id"], leader["leader_epoch"])
                    endpoints.update((e["node_id"], Endpoint(e["node_id"], e["host"], e["port"], e.get("rack")))
                                     for e in found)
                partitions.append(entry)
                errors = True
                continue
            logs.append(partition_log)
            high_watermark = partition_log.high_watermark
            log_start = partition_log.log_start_offset
            stable = partition_log.last_stable_offset
            if part.fetch_offset == (stable if committed_only else high_watermark) and part.fetch_offset >= log_start:
                # Caught up: nothing to read, reserve or charge (most partitions of a wide consumer).
                partitions.append(FetchPartition(part.partition, ErrorCode.none, high_watermark, stable, log_start))
                continue
            records: list[memoryview] = []
            size = 0
            want = min(max(part.partition_max_bytes, 0), max_bytes - total)
            # Reserve before reading, so concurrent fetches see each other's share at once.
            # The answer's first batch may exceed ``want`` (as in Kafka), up to max.message.bytes:
            # room for it is reserved as far as the budget has it, and a batch larger than that
            # is still served, alone, its excess charged once read (never reserving a topic's
            # whole max.message.bytes, which may be more than the budget will ever have).
            largest_batch = ctx.logs.max_message_bytes(name) if total == 0 else 0
            if memory is not None:
                want = min(want, memory.available())
                largest_batch = min(largest_batch, memory.available())
            reserve = max(want, largest_batch)
            if want > 0:
                if memory is not None:
                    memory.charge(reserve)
                try:
                    records = await partition_log.read(part.fetch_offset, want, allow_oversize=total == 0,
                                                       end=stable if committed_only else None)
                    size = sum(len(view) for view in records)
                except KafkaError as exc:
                    partitions.append(FetchPartition(part.partition, exc.code, high_watermark, high_watermark,
                                                     log_start))
                    errors = True
                    continue
                finally:
                    if memory is not None:
                        if size > reserve:
                            memory.charge(size - reserve)
                        else:
                            memory.refund(reserve - size)
            total += size
            aborted = None
            if committed_only and records:
                aborted = [(entry.producer_id, entry.first_offset)
                           for entry in partition_log.aborted_between(part.fetch_offset, stable)]
            partitions.append(FetchPartition(part.partition, ErrorCode.none, high_watermark, stable, log_start,
                                             records, aborted))
        topics.append(FetchTopic(name, topic_id, partitions))
    return topics, total, errors, logs, list(endpoints.values())
