"""FindCoordinator (10): the gateway owning the key's coordinator slot (alone: this one),
for consumer groups (key type 0) and transactional ids (key type 1)."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import Operation, ResourceType
from .base import register, respond

GROUP = 0
TRANSACTION = 1


def _keys(request: Request) -> list[str]:
    body = request.body
    return list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]


def _entry(ctx: RequestContext, key: str, key_type: int) -> dict:
    if key_type == GROUP and not ctx.access.allowed_group(Operation.DESCRIBE, key):
        return dict(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.group_authorization_failed,
                    error_message="DESCRIBE on the group is not allowed")
    if key_type == TRANSACTION and not ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return dict(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.transactional_id_authorization_failed,
                    error_message="DESCRIBE on the transactional id is not allowed")
    if key_type not in (GROUP, TRANSACTION):
        return dict(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.invalid_request,
                    error_message=f"unknown coordinator key type {key_type}")
    broker = ctx.ownership.coordinator(key)
    if broker is None:
        return dict(key=key, node_id=-1, host="", port=-1, error_code=ErrorCode.coordinator_not_available,
                    error_message="the coordinator is moving; retry")
    host, port = ctx.address(broker)
    return dict(key=key, node_id=broker.node_id, host=host, port=port, error_code=ErrorCode.none,
                error_message=None)


def _shape(request: Request, entries: list[dict]):
    if request.header.api_version >= 4:
        return respond(request, dict(coordinators=entries))
    return respond(request, dict(entries[0]))


def _error(request: Request, code: ErrorCode):
    return _shape(request, [dict(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None)
                            for k in _keys(request)])


@register(ApiKey.FIND_COORDINATOR, error=_error)
async def handle_find_coordinator(ctx: RequestContext, request: Request):
    key_type = getattr(request.body, "key_type", GROUP)
    return _shape(request, [_entry(ctx, key, key_type) for key in _keys(request)])
