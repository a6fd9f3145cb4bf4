"""FindCoordinator (10): the gateway owning the key's coordinator slot (alone: this one),
for consumer groups (key type 0) and transactional ids (key type 1); for a share-partition
(key type 2, ``group:topic id:partition``, v6+) the owner of the partition, which holds its
share state (KIP-932)."""

from __future__ import annotations

import base64
import binascii
import uuid

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import Operation, ResourceType
from .base import register, respond

GROUP = 0
TRANSACTION = 1
SHARE = 2


def _topic_id(text: str) -> uuid.UUID:
    """Kafka writes a topic id in base64url (22 characters); a UUID's own form is taken too."""
    if len(text) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    return uuid.UUID(text)


def _share_entry(ctx: RequestContext, key: str) -> dict:
    failed = dict(key=key, node_id=-1, host="", port=-1)
    try:
        group_id, topic_text, partition_text = key.rsplit(":", 2)
        topic_id, partition = _topic_id(topic_text), int(partition_text)
    except (ValueError, binascii.Error):
        return dict(failed, error_code=ErrorCode.invalid_request, error_message="a share key is group:topic id:partition")
    if not ctx.access.allowed_group(Operation.DESCRIBE, group_id):
        return dict(failed, error_code=ErrorCode.group_authorization_failed,
                    error_message="DESCRIBE on the group is not allowed")
    name = ctx.logs.names_by_id().get(topic_id)
    leader = None if name is None else ctx.ownership.leader(name, partition)
    broker = next((b for b in ctx.ownership.brokers() if leader is not None and b.node_id == leader[0]), None)
    if broker is None:
        code = ErrorCode.unknown_topic_or_partition if name is None else ErrorCode.coordinator_not_available
        return dict(failed, error_code=code, error_message=f"no owner of {key} now")
    host, port = ctx.address(broker)
    return dict(key=key, node_id=broker.node_id, host=host, port=port, error_code=ErrorCode.none, error_message=None)


def _keys(request: Request) -> list[str]:
    body = request.body
    return list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]


def _entry(ctx: RequestContext, key: str, key_type: int) -> dict:
    if key_type == SHARE:
        return _share_entry(ctx, key)
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
