"""InitProducerId (22): producer ids for idempotent producers, and for transactional ones
the id's producer under a new epoch (which fences the older ones)."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request
from kafscale.protocol.transactions import MAX_EPOCH

from ..context import RequestContext
from ..security.acl import Operation, ResourceType
from .base import register, respond
from .transactions import fenced_code


def _error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, producer_id=-1, producer_epoch=-1))


@register(ApiKey.INIT_PRODUCER_ID, error=_error)
async def handle_init_producer_id(ctx: RequestContext, request: Request):
    body = request.body
    if body.transactional_id is not None:
        try:
            ctx.access.require_transactional_id(Operation.WRITE, body.transactional_id)
            producer = await ctx.transactions.init_producer_id(body.transactional_id, to_millis(body.transaction_timeout))
        except KafkaError as exc:
            return _error(request, fenced_code(request, 3) if exc.code == ErrorCode.producer_fenced else exc.code)
        return respond(request, dict(error_code=ErrorCode.none, producer_id=producer.producer_id,
                                     producer_epoch=producer.producer_epoch))
    # Kafka 2.8+: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    if not (ctx.access.allowed_cluster(Operation.IDEMPOTENT_WRITE)
            or ctx.access.allowed_any(Operation.WRITE, ResourceType.TOPIC)):
        return _error(request, ErrorCode.cluster_authorization_failed)
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        # KIP-360: an existing producer re-initialising keeps its id with a bumped epoch.
        return respond(request, dict(error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=epoch + 1))
    new_id = await ctx.logs.metadata.allocate_producer_id()
    return respond(request, dict(error_code=ErrorCode.none, producer_id=new_id, producer_epoch=0))
