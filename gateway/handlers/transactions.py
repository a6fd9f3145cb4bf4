"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66). InitProducerId with a transactional
id is in producer_ids.py, FindCoordinator for transactions in coordinator.py.

Every gateway can coordinate any transactional id (its state is in the metadata store,
changed by compare-and-swap); FindCoordinator names the one that owns the id's slot,
so its requests usually meet one gateway.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request
from kafscale.protocol.transactions import PendingOffset, Transaction, TxnState, TxnVersion

from ..context import RequestContext
from ..patterns import compile_regex
from ..security.acl import Operation, ResourceType
from .base import register, respond


def fenced_code(request: Request, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED for clients that know it (KIP-588), INVALID_PRODUCER_EPOCH before."""
    return ErrorCode.producer_fenced if request.header.api_version >= first_fenced_version \
        else ErrorCode.invalid_producer_epoch


def _code(request: Request, exc: KafkaError, first_fenced_version: int) -> ErrorCode:
    return fenced_code(request, first_fenced_version) if exc.code == ErrorCode.producer_fenced else exc.code


# -- AddPartitionsToTxn ------------------------------------------------------------------

def _topic_results(partitions: dict[str, list[tuple[int, ErrorCode]]]) -> list[dict]:
    return [dict(name=name, results_by_partition=[dict(partition_index=index, partition_error_code=code)
                                                  for index, code in results])
            for name, results in partitions.items()]


def _requested(topics) -> dict[str, list[int]]:
    return {topic.name: list(topic.partitions) for topic in topics}


def _add_partitions_error(request: Request, code: ErrorCode):
    body = request.body
    if request.header.api_version >= 4:
        return respond(request, dict(error_code=code, results_by_transaction=[]))
    return respond(request, dict(results_by_topic_v3_and_below=_topic_results(
        {name: [(p, code) for p in parts] for name, parts in _requested(body.v3_and_below_topics).items()})))


async def _add_partitions(ctx: RequestContext, request: Request, transactional_id: str, producer_id: int,
                          producer_epoch: int, topics: dict[str, list[int]], verify_only: bool) -> dict[str, list]:
    """Each partition's answer: all added, or none (OPERATION_NOT_ATTEMPTED beside the refused)."""
    refused: dict[tuple[str, int], ErrorCode] = {}
    try:
        ctx.access.require_transactional_id(Operation.WRITE, transactional_id)
    except KafkaError as exc:
        return {name: [(p, exc.code) for p in parts] for name, parts in topics.items()}
    catalog = ctx.logs.topics()
    for name, parts in topics.items():
        for index in parts:
            if not ctx.access.allowed_topic(Operation.WRITE, name):
                refused[(name, index)] = ErrorCode.topic_authorization_failed
            elif name not in catalog or not 0 <= index < catalog[name].partitions:
                refused[(name, index)] = ErrorCode.unknown_topic_or_partition
    if refused:
        return {name: [(p, refused.get((name, p), ErrorCode.operation_not_attempted)) for p in parts]
                for name, parts in topics.items()}
    wanted = [(name, index) for name, parts in topics.items() for index in parts]
    try:
        if verify_only:
            current = await ctx.transactions.state(transactional_id)
            holding: frozenset[tuple[str, int]] = frozenset()
            if current is not None and current.state == TxnState.ONGOING \
                    and (current.producer_id, current.producer_epoch) == (producer_id, producer_epoch):
                holding = current.partitions
            return {name: [(p, ErrorCode.none if (name, p) in holding else ErrorCode.invalid_txn_state)
                           for p in parts] for name, parts in topics.items()}
        await ctx.transactions.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
        code = ErrorCode.none
    except KafkaError as exc:
        code = _code(request, exc, 2)
    return {name: [(p, code) for p in parts] for name, parts in topics.items()}


@register(ApiKey.ADD_PARTITIONS_TO_TXN, error=_add_partitions_error)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Request):
    body = request.body
    if request.header.api_version < 4:
        results = await _add_partitions(ctx, request, body.v3_and_below_transactional_id,
                                        body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                        _requested(body.v3_and_below_topics), False)
        return respond(request, dict(results_by_topic_v3_and_below=_topic_results(results)))
    # v4 (KIP-890): batches of transactions, sent by brokers to verify before a produce.
    if not ctx.access.allowed_cluster(Operation.CLUSTER_ACTION):
        return respond(request, dict(error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=[]))
    answers = []
    for txn in body.transactions:
        results = await _add_partitions(ctx, request, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                        _requested(txn.topics), txn.verify_only)
        answers.append(dict(transactional_id=txn.transactional_id, topic_results=_topic_results(results)))
    return respond(request, dict(error_code=ErrorCode.none, results_by_transaction=answers))


# -- AddOffsetsToTxn, EndTxn -------------------------------------------------------------

def _plain_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code))


@register(ApiKey.ADD_OFFSETS_TO_TXN, error=_plain_error)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Request):
    body = request.body
    try:
        ctx.access.require_transactional_id(Operation.WRITE, body.transactional_id)
        ctx.access.require_group(Operation.READ, body.group_id)
        await ctx.transactions.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                           body.group_id)
    except KafkaError as exc:
        return _plain_error(request, _code(request, exc, 2))
    return _plain_error(request, ErrorCode.none)


def version_of(request: Request, first_v2_version: int) -> TxnVersion:
    """The transaction protocol a request speaks: its API version says (Kafka's clients send
    the versions of transactions v2 only once the broker finalized ``transaction.version=2``)."""
    return TxnVersion.V2 if request.header.api_version >= first_v2_version else TxnVersion.V1


@register(ApiKey.END_TXN, error=_plain_error)
async def handle_end_txn(ctx: RequestContext, request: Request):
    body = request.body
    try:
        ctx.access.require_transactional_id(Operation.WRITE, body.transactional_id)
        ended = await ctx.transactions.end(body.transactional_id, body.producer_id, body.producer_epoch,
                                           body.committed, version_of(request, 5))
    except KafkaError as exc:
        return _plain_error(request, _code(request, exc, 2))
    # Decided: the commit point is stored (the markers follow at once, and the client's next
    # transaction finishes them first if they are not written yet). In v2 the client goes on
    # under the producer it is given here: the next epoch, or a new id when they ran out.
    if request.header.api_version >= 5:
        producer_id, producer_epoch = ended.producer_after
        return respond(request, dict(error_code=ErrorCode.none, producer_id=producer_id,
                                     producer_epoch=producer_epoch))
    return _plain_error(request, ErrorCode.none)


# -- TxnOffsetCommit ---------------------------------------------------------------------

def _txn_offset_answer(request: Request, codes: dict[tuple[str, int], ErrorCode]):
    topics: dict[str, list[dict]] = {}
    for (name, index), code in codes.items():
        topics.setdefault(name, []).append(dict(partition_index=index, error_code=code))
    return respond(request, dict(topics=[dict(name=name, partitions=parts) for name, parts in topics.items()]))


def _txn_offset_error(request: Request, code: ErrorCode):
    return _txn_offset_answer(request, {(t.name, p.partition_index): code for t in request.body.topics
                                        for p in t.partitions})


@register(ApiKey.TXN_OFFSET_COMMIT, error=_txn_offset_error)
async def handle_txn_offset_commit(ctx: RequestContext, request: Request):
    body = request.body
    try:
        ctx.access.require_transactional_id(Operation.WRITE, body.transactional_id)
        ctx.access.require_group(Operation.READ, body.group_id)
        ctx.groups.check_coordinator(body.group_id)
        generation = getattr(body, "generation_id", -1)
        if generation >= 0 or getattr(body, "member_id", ""):  # v3+ (KIP-447): a member's commit is checked
            ctx.groups.check_commit(body.group_id, body.member_id, generation, body.group_instance_id)
    except KafkaError as exc:
        return _txn_offset_error(request, _code(request, exc, 3))
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets = []
    for topic in body.topics:
        allowed = ctx.access.allowed_topic(Operation.READ, topic.name)
        for part in topic.partitions:
            codes[(topic.name, part.partition_index)] = ErrorCode.none if allowed \
                else ErrorCode.topic_authorization_failed
            if allowed:
                offsets.append(PendingOffset(body.group_id, topic.name, part.partition_index, part.committed_offset,
                                             getattr(part, "committed_leader_epoch", -1), part.committed_metadata))
    if offsets:
        try:
            await ctx.transactions.commit_offsets(body.transactional_id, body.producer_id, body.producer_epoch,
                                                  offsets, version_of(request, 5))
        except KafkaError as exc:
            code = _code(request, exc, 3)
            codes = {key: code if value == ErrorCode.none else value for key, value in codes.items()}
    return _txn_offset_answer(request, codes)


# -- WriteTxnMarkers (an operator's abort of a hanging transaction, Kafka's admin tools; v2
#    names the marker's transaction version, which changes nothing in the marker) --

def _markers_error(request: Request, code: ErrorCode):
    return respond(request, dict(markers=[dict(producer_id=m.producer_id, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p, error_code=code) for p in t.partition_indexes])
        for t in m.topics]) for m in request.body.markers]))


@register(ApiKey.WRITE_TXN_MARKERS, error=_markers_error)
async def handle_write_txn_markers(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.CLUSTER_ACTION):
        return _markers_error(request, ErrorCode.cluster_authorization_failed)
    answers = []
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                try:
                    partition_log = await ctx.logs.get(topic.name, index)
                    await partition_log.write_marker(marker.producer_id, marker.producer_epoch,
                                                     marker.transaction_result, marker.coordinator_epoch)
                    code = ErrorCode.none
                except KafkaError as exc:
                    code = exc.code
                partitions.append(dict(partition_index=index, error_code=code))
            topics.append(dict(name=topic.name, partitions=partitions))
        answers.append(dict(producer_id=marker.producer_id, topics=topics))
    return respond(request, dict(markers=answers))


# -- DescribeProducers, DescribeTransactions, ListTransactions ----------------------------

def _producers_error(request: Request, code: ErrorCode):
    return respond(request, dict(topics=[dict(name=t.name, partitions=[
        dict(partition_index=p, error_code=code, error_message=None, active_producers=[])
        for p in t.partition_indexes]) for t in request.body.topics]))


@register(ApiKey.DESCRIBE_PRODUCERS, error=_producers_error)
async def handle_describe_producers(ctx: RequestContext, request: Request):
    topics = []
    for topic in request.body.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                ctx.access.require_topic(Operation.READ, topic.name)
                partition_log = await ctx.logs.get(topic.name, index)
            except KafkaError as exc:
                partitions.append(dict(partition_index=index, error_code=exc.code, error_message=str(exc),
                                       active_producers=[]))
                continue
            open_ = partition_log.open_transactions()
            producers = [dict(producer_id=pid, producer_epoch=epoch, last_sequence=last_sequence,
                              last_timestamp=-1, coordinator_epoch=-1, current_txn_start_offset=open_.get(pid, -1))
                         for pid, epoch, last_sequence in partition_log.producers.describe()]
            known = {p["producer_id"] for p in producers}
            producers += [dict(producer_id=pid, producer_epoch=-1, last_sequence=-1, last_timestamp=-1,
                               coordinator_epoch=-1, current_txn_start_offset=first)
                          for pid, first in open_.items() if pid not in known]
            partitions.append(dict(partition_index=index, error_code=ErrorCode.none, error_message=None,
                                   active_producers=producers))
        topics.append(dict(name=topic.name, partitions=partitions))
    return respond(request, dict(topics=topics))


def _topic_data(partitions: Iterable[tuple[str, int]]) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for name, index in sorted(partitions):
        by_topic.setdefault(name, []).append(index)
    return [dict(topic=name, partitions=parts) for name, parts in by_topic.items()]


def _described(transactional_id: str, txn: Transaction | None, code: ErrorCode = ErrorCode.none) -> dict:
    if txn is None:
        return dict(error_code=code if code != ErrorCode.none else ErrorCode.transactional_id_not_found,
                    transactional_id=transactional_id, transaction_state="", transaction_timeout=0,
                    transaction_start_time=0, producer_id=-1, producer_epoch=-1, topics=[])
    return dict(error_code=ErrorCode.none, transactional_id=transactional_id, transaction_state=txn.state.value,
                transaction_timeout=txn.timeout_ms, transaction_start_time=txn.started_ms,
                producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, topics=_topic_data(txn.partitions))


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(transaction_states=[_described(t, None, code)
                                                     for t in request.body.transactional_ids]))


@register(ApiKey.DESCRIBE_TRANSACTIONS, error=_describe_error)
async def handle_describe_transactions(ctx: RequestContext, request: Request):
    states = []
    for transactional_id in request.body.transactional_ids:
        if not ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            states.append(_described(transactional_id, None, ErrorCode.transactional_id_authorization_failed))
            continue
        states.append(_described(transactional_id, await ctx.transactions.state(transactional_id)))
    return respond(request, dict(transaction_states=states))


def _list_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, unknown_state_filters=[], transaction_states=[]))


@register(ApiKey.LIST_TRANSACTIONS, error=_list_error)
async def handle_list_transactions(ctx: RequestContext, request: Request):
    body = request.body
    known = {state.value for state in TxnState}
    states = set(body.state_filters)
    producers = set(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)  # v1 (KIP-994): running longer than this
    pattern = getattr(body, "transactional_id_pattern", None)  # v2 (KIP-1152): RE2, as Kafka's RE2/J
    try:
        matches = compile_regex(pattern).fullmatch if pattern else None
    except KafkaError as exc:
        return respond(request, dict(error_code=exc.code, unknown_state_filters=[], transaction_states=[]))
    now = ctx.transactions.now_ms()
    listed = []
    for txn in await ctx.transactions.all():
        if states and txn.state.value not in states or producers and txn.producer_id not in producers:
            continue
        if matches is not None and not matches(txn.transactional_id):
            continue
        if duration >= 0 and not (txn.state == TxnState.ONGOING and now - txn.started_ms > duration):
            continue
        if not ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn.transactional_id,
                                  quiet=True):
            continue
        listed.append(dict(transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                           transaction_state=txn.state.value))
    return respond(request, dict(error_code=ErrorCode.none, unknown_state_filters=sorted(states - known),
                                 transaction_states=listed))
