"""Produce (0): validate each partition's record set, assign offsets in arrival order,
answer once the group-committed flush is durable (acks 1 / -1) or at once (acks 0)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import CorruptBatch, ErrorCode, KafkaError, RecordsWithoutKey
from kafscale.protocol.messages import Request
from kafscale.protocol.produce_response import ProduceAnswer, ProducePartition, ProduceTopic
from kafscale.protocol.record_policy import (
    CODECS,
    recompress,
    records_out_of_time,
    stamp_log_append_time,
)
from kafscale.protocol.records import BatchHeader, has_transactional_batch, split_batches, validate_record_set
from kafscale.protocol.response_fields import Endpoint
from kafscale.protocol.transactions import TxnVersion

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..lfs import LfsRecordsRefused
from ..log import INTERNAL_TOPICS, FlushTicket, PartitionLog
from ..security.acl import Operation, ResourceType
from ..topic_configs import TopicPolicy
from .base import Completion, Ready, Settled, leader_hint, register
from .transactional_produce import VerifiedBatch, verify_transaction
from .transactions import version_of

log = logging.getLogger("kafscale.handlers.produce")


def _partition(index: int, code: ErrorCode, message: str | None = None) -> ProducePartition:
    """A partition's answer with nothing appended."""
    return ProducePartition(index, code, error_message=message)


def _refused(index: int, code: ErrorCode, reason: str, indexes: list[int]) -> ProducePartition:
    """A batch refused for some of its records, nothing of it stored: Produce v8+ names
    each (Kafka's record_errors, the first 100)."""
    return ProducePartition(index, code, error_message=f"{len(indexes)} record(s) refused: {reason} (the first at "
                            f"batch index {indexes[0]})", record_errors=[(i, reason) for i in indexes[:100]])


class RecordsRefused(Exception):
    """Records the topic's configs refuse (see :func:`_refused`)."""

    def __init__(self, code: ErrorCode, reason: str, indexes: list[int]) -> None:
        super().__init__(reason)
        self.code, self.reason, self.indexes = code, reason, indexes


def apply_policy(policy: TopicPolicy, records: bytearray | memoryview, headers: list[BatchHeader],
                 now_ms: int) -> tuple[bytearray | memoryview, list[BatchHeader]]:
    """Check and rewrite a validated record set as the topic's configs ask, as Kafka's
    LogValidator does: CreateTime bounds, the topic's codec, LogAppendTime (keys on
    compacted topics are checked by the validating walk)."""
    for header in headers:
        if policy.checks_timestamps and not policy.log_append_time:
            late = records_out_of_time(records, header, now_ms - policy.timestamp_before_max_ms,
                                       now_ms + policy.timestamp_after_max_ms)
            if late:
                raise RecordsRefused(ErrorCode.invalid_timestamp, "timestamp out of the range the topic accepts "
                                     "(message.timestamp.before.max.ms / after.max.ms)", late)
    codec = CODECS.get(policy.compression)
    if codec is not None and any(header.compression != codec for header in headers):
        records = bytearray(b"".join(
            recompress(records, header, codec, policy.compression_level) if header.compression != codec
            else bytes(records[header.position:header.position + header.size]) for header in headers))
        headers = split_batches(records, check_crc=False)
    if policy.log_append_time:
        headers = [stamp_log_append_time(records, header, now_ms) for header in headers]
    return records, headers


def _error(request: Request, code: ErrorCode) -> ProduceAnswer:
    return ProduceAnswer([ProduceTopic(getattr(topic, "name", ""), [_partition(p.index, code)
                                                                   for p in topic.partition_data],
                                       getattr(topic, "topic_id", None))
                          for topic in request.body.topic_data])


def _timeout(request: Request, limit: float) -> float:
    """The client's timeout_ms (its wait for durability), within the gateway's request timeout."""
    return min(max(to_millis(request.body.timeout), 0) / 1000 or limit, limit)


@register(ApiKey.PRODUCE, error=_error, ordered=True, timeout=_timeout)
async def handle_produce(ctx: RequestContext, request: Request) -> Completion:
    if request.header.api_version >= _FIRST_BY_TOPIC_ID:
        return await _produce_by_topic_id(ctx, request)
    return await _produce(ctx, request)


_FIRST_BY_TOPIC_ID = 13  # Produce v13 (KIP-516) names topics by id


async def _produce_by_topic_id(ctx: RequestContext, request: Request) -> Completion:
    """Produce v13: each topic id named, the request produced as by name, its answer by id
    again; an id no topic has is UNKNOWN_TOPIC_ID."""
    names = ctx.logs.names_by_id()
    named, unknown, ids = [], [], {}
    for topic in request.body.topic_data:
        name = names.get(topic.topic_id)
        if name is None:
            unknown.append(ProduceTopic("", [_partition(p.index, ErrorCode.unknown_topic_id, "unknown topic id")
                                             for p in topic.partition_data], topic.topic_id))
        else:
            ids[name] = topic.topic_id
            named.append(_NamedTopic(name, topic.partition_data))
    body = request.body
    by_name = _NamedRequest(body.transactional_id, body.acks, body.timeout, named)
    return _AnsweredById(await _produce(ctx, Request(request.header, by_name)), ids, unknown)


@dataclass(frozen=True, slots=True)
class _NamedTopic:
    name: str
    partition_data: tuple


@dataclass(frozen=True, slots=True)
class _NamedRequest:
    """A Produce v13 body with its topics named: what the produce path reads of a request."""

    transactional_id: str | None
    acks: int
    timeout: object
    topic_data: list[_NamedTopic]


@dataclass(frozen=True, slots=True)
class _AnsweredById:
    completion: Completion
    ids: dict[str, UUID | None]
    unknown: list[ProduceTopic]

    def settle(self, then: Callable[[], None]) -> Settled:
        return self.completion.settle(then)

    def answer_now(self) -> ProduceAnswer | None:
        return self._by_id(self.completion.answer_now())

    async def answer(self, deadline: float) -> ProduceAnswer | None:
        return self._by_id(await self.completion.answer(deadline))

    def _by_id(self, answer: ProduceAnswer | None) -> ProduceAnswer | None:
        if answer is None:
            return None
        for topic in answer.topics:
            topic.topic_id = self.ids.get(topic.name)
        answer.topics += self.unknown
        return answer


async def _produce(ctx: RequestContext, request: Request) -> Completion:
    """Decides each partition's fate (refused, or appended), then appends in request order:
    the offsets follow arrival order. The answer waits for the flushes."""
    body = request.body
    if body.acks not in (0, 1, -1):
        return Ready(_error(request, ErrorCode.invalid_required_acks))
    refusal = _request_refusal(ctx, body)
    if refusal is not None:
        return Ready(_error(request, refusal))
    # What needs awaiting (topic creation, partition logs, the transaction's state, LFS
    # pointers) first, for every partition; then no await between a decision and its append.
    facts = await _gather_facts(ctx, body, version_of(request, 12))
    results: dict[tuple[str, int], ProducePartition] = {}
    waits: list[_Wait] = []
    produced_bytes = produced_records = 0
    now_ms = ctx.clock.now_ms()
    for topic in body.topic_data:
        policy = ctx.logs.policy(ctx.logs.topics().get(topic.name))
        for part in topic.partition_data:
            key = (topic.name, part.index)
            decided = _decide(facts, key, part.records, policy, ctx.config.limits.max_frame_bytes, now_ms)
            if isinstance(decided, ProducePartition):
                results[key] = decided
                continue
            try:
                base_offset, ticket = decided.target.append(decided.records, decided.headers)
            except KafkaError as exc:
                results[key] = _partition(part.index, exc.code, message=str(exc))
                continue
            if decided.check is not None:
                decided.check.done(decided.target)
            produced_bytes += len(part.records)
            produced_records += sum(h.records_count for h in decided.headers)
            waits.append(_Wait(key, base_offset, ticket, decided.target,
                               now_ms if policy.log_append_time else -1))
    ctx.metrics.produced_bytes.inc(produced_bytes)
    ctx.metrics.produced_records.inc(produced_records)
    return _Flushes(ctx, request, results, waits)


def _request_refusal(ctx: RequestContext, body) -> ErrorCode | None:
    """Why the whole request is refused, if it is: its transactional id."""
    transactional_id = body.transactional_id
    if transactional_id is None and any(
            has_transactional_batch(part.records or b"") for topic in body.topic_data for part in topic.partition_data):
        # A transactional batch without a transactional id is refused as Kafka refuses it.
        return ErrorCode.transactional_id_authorization_failed
    if transactional_id is not None and not ctx.access.allowed(
            Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    return None


@dataclass(slots=True)
class _Facts:
    """What a request's awaited checks found, per partition."""

    logs: dict[tuple[str, int], PartitionLog | KafkaError]  # the log, or why it may not be written
    transactional: bool
    verified: dict[tuple[str, int], VerifiedBatch | KafkaError]  # KIP-890: the transaction holds the partition
    lfs_refused: dict[tuple[str, int], LfsRecordsRefused | KafkaError]


async def _gather_facts(ctx: RequestContext, body, transaction_version: TxnVersion) -> _Facts:
    """What each partition's fate depends on. Usually every fact is at hand (the topics exist
    and are not LFS topics, their logs are loaded, no transaction): nothing is awaited and no
    deadline needs a cancel scope. Otherwise the awaited checks must end by the request's
    deadline."""
    at_hand = _facts_at_hand(ctx, body)
    if at_hand is not None:
        return at_hand
    with trio.CancelScope(deadline=ctx.deadline):  # fail_at, without its generator
        return await _awaited_facts(ctx, body, transaction_version)
    raise trio.TooSlowError  # reached only when the deadline cancelled the scope


def _facts_at_hand(ctx: RequestContext, body) -> _Facts | None:
    """The facts when none needs awaiting; ``None`` when one does."""
    if body.transactional_id is not None:
        return None
    topics = ctx.logs.topics()
    logs: dict[tuple[str, int], PartitionLog | KafkaError] = {}
    for topic in body.topic_data:
        info = topics.get(topic.name)
        if info is None:
            return None  # created, or refused, by the awaited checks
        lfs = ctx.logs.policy(info).lfs
        if lfs.enabled or lfs.require_sdk:
            return None
        refusal = _refusal(ctx, topic.name)
        for part in topic.partition_data:
            key = (topic.name, part.index)
            try:
                if refusal is not None:
                    raise refusal
                found = ctx.logs.current(topic.name, part.index)
            except KafkaError as exc:
                logs[key] = exc
                continue
            if found is None:
                return None  # to be loaded
            logs[key] = found
    return _Facts(logs, False, {}, {})


async def _awaited_facts(ctx: RequestContext, body, transaction_version: TxnVersion) -> _Facts:
    unusable: dict[str, KafkaError] = {}
    for topic in body.topic_data:
        refusal = await _topic_refusal(ctx, topic.name)
        if refusal is not None:
            unusable[topic.name] = refusal
    logs: dict[tuple[str, int], PartitionLog | KafkaError] = {}
    for topic in body.topic_data:
        for part in topic.partition_data:
            try:
                if topic.name in unusable:
                    raise unusable[topic.name]
                logs[(topic.name, part.index)] = await ctx.logs.get(topic.name, part.index)
            except KafkaError as exc:
                logs[(topic.name, part.index)] = exc
    transactional_id = body.transactional_id
    verified = {} if transactional_id is None else await verify_transaction(ctx, transactional_id, body, logs,
                                                                            transaction_version)
    return _Facts(logs, transactional_id is not None, verified, await _check_lfs(ctx, body, logs))


def _refusal(ctx: RequestContext, name: str) -> KafkaError | None:
    """Why an existing topic may not be written, if it may not."""
    if not ctx.access.allowed_topic(Operation.WRITE, name):
        return KafkaError(ErrorCode.topic_authorization_failed, "WRITE is not allowed")
    if name in INTERNAL_TOPICS:  # Kafka: "Cannot append to internal topic"
        return KafkaError(ErrorCode.invalid_topic_exception, f"{name} is an internal topic: clients cannot write to it")
    return None


async def _topic_refusal(ctx: RequestContext, name: str) -> KafkaError | None:
    """Why a topic may not be written (answered per partition), creating it if it may be."""
    refusal = _refusal(ctx, name)
    if refusal is not None or name in ctx.logs.topics():
        return refusal
    if not ctx.access.may_create_topic(name):
        return KafkaError(ErrorCode.topic_authorization_failed, "CREATE is not allowed")
    try:
        await ctx.logs.ensure_topic(name)
    except FAILURES as exc:
        return exc if isinstance(exc, KafkaError) else KafkaError(code_of(exc), str(exc))
    return None


async def _check_lfs(ctx: RequestContext, body, logs: dict) -> dict[tuple[str, int], LfsRecordsRefused | KafkaError]:
    """Record sets of LFS topics: pointers counted and claimed, and under require_sdk oversized
    raw values and bad pointers refused (their HEADs are awaited here, before any append); a
    store that fails the checks gets the partition KAFKA_STORAGE_ERROR (retriable)."""
    refused: dict[tuple[str, int], LfsRecordsRefused | KafkaError] = {}
    for topic in body.topic_data:
        lfs = ctx.logs.policy(ctx.logs.topics().get(topic.name)).lfs
        if not (lfs.enabled or lfs.require_sdk):
            continue
        for part in topic.partition_data:
            key = (topic.name, part.index)
            if isinstance(logs[key], KafkaError) or not part.records:
                continue
            try:
                await ctx.gateway.lfs.check_produce(topic.name, lfs, part.records)
            except (LfsRecordsRefused, KafkaError) as exc:
                refused[key] = exc
    return refused


@dataclass(slots=True)
class _Append:
    """A partition's records, checked and rewritten as its topic asks: to be appended."""

    target: PartitionLog
    records: bytearray | memoryview
    headers: list[BatchHeader]
    check: VerifiedBatch | None  # a transactional batch's guard, released once appended


def _decide(facts: _Facts, key: tuple[str, int], records, policy: TopicPolicy, max_frame_bytes: int,
            now_ms: int) -> ProducePartition | _Append:
    """One partition of a Produce: its refusal, or what to append. Kafka's order of checks:
    the log, the records, LFS, the transaction, the size, the topic's policy."""
    index = key[1]
    target = facts.logs[key]
    if isinstance(target, KafkaError):
        return _partition(index, target.code, message=str(target))
    if not records:
        return _partition(index, ErrorCode.corrupt_message, message="no records")
    try:
        # Records may not inflate past what one request may carry.
        headers = validate_record_set(records, max_frame_bytes, require_keys=policy.compact)
    except RecordsWithoutKey as exc:
        return _refused(index, exc.code, "a compacted topic cannot accept a record without a key", exc.indexes)
    except CorruptBatch as exc:  # CORRUPT_MESSAGE, or INVALID_RECORD for a lying header
        return _partition(index, exc.code, message=str(exc))
    lfs_refusal = facts.lfs_refused.get(key)
    if isinstance(lfs_refusal, LfsRecordsRefused):
        return _refused(index, lfs_refusal.code, lfs_refusal.reason, lfs_refusal.indexes)
    if lfs_refusal is not None:
        return _partition(index, lfs_refusal.code, message=str(lfs_refusal))
    check = facts.verified.get(key)
    if facts.transactional and check is None:
        return _partition(index, ErrorCode.corrupt_message, message="no batch")
    if isinstance(check, KafkaError):
        return _partition(index, check.code, message=str(check))
    if check is not None and not check.holds(target, headers):
        return _partition(index, check.refusal.code, message=str(check.refusal))
    too_large = next((h for h in headers if h.size > policy.max_message_bytes), None)
    if too_large is not None:
        return _partition(index, ErrorCode.message_too_large,
                          message=f"batch of {too_large.size} bytes exceeds max.message.bytes {policy.max_message_bytes}")
    try:
        # Stamped in place when the records are still in the request's own frame.
        writable = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        stored, headers = apply_policy(policy, writable, headers, now_ms)
    except RecordsRefused as exc:
        return _refused(index, exc.code, exc.reason, exc.indexes)
    except KafkaError as exc:  # a payload that does not recompress (CORRUPT_MESSAGE)
        return _partition(index, exc.code, message=str(exc))
    return _Append(target, stored, headers, check)


@dataclass(slots=True)
class _Wait:
    """An appended partition's part of the answer, once its flush is done."""

    key: tuple[str, int]
    base_offset: int
    ticket: FlushTicket
    target: PartitionLog
    append_time: int  # the LogAppendTime stamped, or -1


@dataclass(slots=True)
class _Flushes:
    """A Produce request's answer, once the flushes of its appends are done.

    acks=0 waits too, without answering: the request keeps its bytes in the memory budget
    until its flush is done, so a client producing with acks=0 faster than the store writes
    is held back instead of filling the partition buffers."""

    ctx: RequestContext
    request: Request
    results: dict[tuple[str, int], ProducePartition]  # partitions answered already (refused)
    waits: list[_Wait]

    def settle(self, then: Callable[[], None]) -> Settled:
        if self.request.body.transactional_id is not None:
            return Settled.BY_AWAITING  # its transaction's state is stored before the answer
        for wait in self.waits:
            if not wait.ticket.done:
                wait.ticket.then(then)
                return Settled.LATER
        return Settled.NOW

    def answer_now(self) -> ProduceAnswer | None:
        # Most tickets of a request complete in the same flush: once one is done the others
        # usually are too, and nothing is awaited (a request can name hundreds of partitions).
        for wait in self.waits:
            self._record(wait)
        return self._answer()

    async def answer(self, deadline: float) -> ProduceAnswer | None:
        transactional = self.request.body.transactional_id is not None
        with trio.CancelScope(deadline=deadline):
            for wait in self.waits:
                try:
                    if not wait.ticket.done:
                        await wait.ticket.wait()
                    if transactional and wait.ticket.error is None:
                        await wait.target.persist_transactions()  # a transaction begun here is known before its ack
                except KafkaError as exc:
                    self.results[wait.key] = _partition(wait.key[1], exc.code, message=str(exc))
                else:
                    self._record(wait)
        return self._answer()

    def _record(self, wait: _Wait) -> None:
        """A partition's result once its ticket is done."""
        error = wait.ticket.error
        self.results[wait.key] = _partition(wait.key[1], error.code, message=str(error)) if error is not None else \
            ProducePartition(wait.key[1], ErrorCode.none, wait.base_offset, wait.append_time,
                             wait.target.log_start_offset)

    def _answer(self) -> ProduceAnswer | None:
        body, results = self.request.body, self.results
        if body.acks == 0:
            return None
        for wait in self.waits:
            results.setdefault(wait.key, _partition(wait.key[1], ErrorCode.request_timed_out,
                                                    message="flush not durable in time"))
        endpoints: dict[int, Endpoint] = {}
        for (name, index), result in results.items():
            if result.error_code == ErrorCode.not_leader_or_follower:
                leader, found = leader_hint(self.ctx, name, index)
                result.current_leader = (leader["leader_id"], leader["leader_epoch"])
                endpoints.update((e["node_id"], Endpoint(e["node_id"], e["host"], e["port"], e.get("rack")))
                                 for e in found)
        return ProduceAnswer([ProduceTopic(topic.name, [results[(topic.name, p.index)] for p in topic.partition_data])
                              for topic in body.topic_data], node_endpoints=list(endpoints.values()))
