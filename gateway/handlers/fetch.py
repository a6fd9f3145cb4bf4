"""Fetch (1): byte-exact stored batches, with max_wait/min_bytes honoured across all
partitions of the request in one wait that wakes when any of them gets new data.

An answer is capped by the request's max_bytes and the gateway's fetch_max_bytes
(the first batch is served even if larger, as Kafka does), and by the memory
budget: what a partition may add is reserved from the connection's account before
it is read, so many large fetches at once (or one client pipelining them) get
less, or nothing until memory frees, instead of exhausting it.
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
from ..security.acl import Operation
from .base import check_leader_epoch, leader_hint, register


def _targets(ctx: RequestContext, request: Request):
    """(topic name or None, topic id, topic entry) for each requested topic."""
    by_id: dict | None = None
    for topic in request.body.topics:
        topic_id = getattr(topic, "topic_id", None)
        name = getattr(topic, "topic", None)
        if name is None and topic_id is not None:
            if by_id is None:
                by_id = {info.topic_id: name for name, info in ctx.logs.topics().items()}
            name = by_id.get(topic_id)
        yield name, topic_id, topic


READ_COMMITTED = 1


def _error(request: Request, code: ErrorCode) -> FetchAnswer:
    return FetchAnswer([FetchTopic(getattr(t, "topic", None), getattr(t, "topic_id", None),
                                   [FetchPartition(p.partition, code) for p in t.partitions])
                        for t in request.body.topics])


@register(ApiKey.FETCH, error=_error)
async def handle_fetch(ctx: RequestContext, request: Request):
    body = request.body
    max_wait = max(to_millis(body.max_wait), 0) / 1000
    deadline = trio.current_time() + min(max_wait, ctx.config.limits.request_timeout_ms / 1000)
    max_bytes = min(body.max_bytes, ctx.config.limits.fetch_max_bytes) if body.max_bytes > 0 else ctx.config.limits.fetch_max_bytes
    min_bytes = max(body.min_bytes, 0)
    targets = list(_targets(ctx, request))
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
        woken = trio.Event()
        for partition_log in logs:
            partition_log.add_waiter(woken)
        try:
            with trio.move_on_at(deadline):
                await woken.wait()
        finally:
            for partition_log in logs:
                partition_log.remove_waiter(woken)
    ctx.metrics.fetched_bytes.inc(total)
    # session_id 0: no incremental fetch session, clients keep sending full requests.
    return FetchAnswer(topics, node_endpoints=endpoints)


async def _collect(ctx: RequestContext, targets, max_bytes: int, memory: RequestMemory | None,
                   committed_only: bool):
    topics = []
    total = 0
    errors = False
    logs = []
    endpoints: dict[int, Endpoint] = {}  # leaders named in NOT_LEADER_OR_FOLLOWER answers (Fetch v16+)
    for name, topic_id, topic in targets:
        partitions = []
        for part in topic.partitions:
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
