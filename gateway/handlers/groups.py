"""JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13): the classic group protocol."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import to_millis
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import Operation
from .base import register, respond
from .consumer_groups import described_topics


def _join_error(request: Request, code: ErrorCode):
    # protocol_name is nullable from v7 only.
    protocol_name = None if request.header.api_version >= 7 else ""
    return respond(request, dict(error_code=code, generation_id=-1, protocol_type=None, protocol_name=protocol_name,
                                 leader="", member_id=request.body.member_id, members=[]))


def _join_timeout(request: Request, _request_timeout: float) -> float:
    body = request.body
    rebalance = to_millis(getattr(body, "rebalance_timeout", None))
    return max(rebalance if rebalance > 0 else to_millis(body.session_timeout), 0) / 1000 + 5


@register(ApiKey.JOIN_GROUP, error=_join_error, timeout=_join_timeout)
async def handle_join_group(ctx: RequestContext, request: Request):
    ctx.access.require_group(Operation.READ, request.body.group_id)
    body = request.body
    version = request.header.api_version
    session = to_millis(body.session_timeout)
    rebalance = to_millis(getattr(body, "rebalance_timeout", None))
    if ctx.shares.knows(body.group_id):  # as Kafka: a group id names one kind of group
        return _join_error(request, ErrorCode.inconsistent_group_protocol)
    try:
        result = await ctx.groups.join(
            group_id=body.group_id, member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            client_id=request.header.client_id or "", client_host=ctx.peer_host,
            session_timeout_ms=session, rebalance_timeout_ms=rebalance if rebalance > 0 else session,
            protocol_type=body.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
            require_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
            topics=lambda: described_topics(ctx),
        )
    except KafkaError as exc:
        return _join_error(request, exc.code)
    if version < 7 and result["protocol_name"] is None:
        result["protocol_name"] = ""
    return respond(request, result)


def _sync_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, protocol_type=None, protocol_name=None, assignment=b""))


@register(ApiKey.SYNC_GROUP, error=_sync_error, timeout=lambda request, _request_timeout: 300.0)
async def handle_sync_group(ctx: RequestContext, request: Request):
    ctx.access.require_group(Operation.READ, request.body.group_id)
    body = request.body
    try:
        result = await ctx.groups.sync(
            group_id=body.group_id, member_id=body.member_id, generation=body.generation_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None), protocol_name=getattr(body, "protocol_name", None),
            assignments={a.member_id: bytes(a.assignment) for a in body.assignments},
        )
    except KafkaError as exc:
        return _sync_error(request, exc.code)
    return respond(request, result)


def _heartbeat_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code))


@register(ApiKey.HEARTBEAT, error=_heartbeat_error)
async def handle_heartbeat(ctx: RequestContext, request: Request):
    ctx.access.require_group(Operation.READ, request.body.group_id)
    body = request.body
    try:
        ctx.groups.heartbeat(group_id=body.group_id, member_id=body.member_id, generation=body.generation_id,
                             group_instance_id=getattr(body, "group_instance_id", None))
    except KafkaError as exc:
        return _heartbeat_error(request, exc.code)
    return respond(request, dict(error_code=ErrorCode.none))


def _leaving(request: Request) -> list[tuple[str, str | None]]:
    body = request.body
    if hasattr(body, "members"):
        return [(m.member_id, m.group_instance_id) for m in body.members]
    return [(body.member_id, None)]


def _leave_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, members=[
        dict(member_id=member_id, group_instance_id=instance_id, error_code=code)
        for member_id, instance_id in _leaving(request)
    ]))


@register(ApiKey.LEAVE_GROUP, error=_leave_error)
async def handle_leave_group(ctx: RequestContext, request: Request):
    ctx.access.require_group(Operation.READ, request.body.group_id)
    results = await ctx.groups.leave(request.body.group_id, _leaving(request))
    members = [dict(member_id=m, group_instance_id=i, error_code=code) for m, i, code in results]
    if request.header.api_version < 3:
        return respond(request, dict(error_code=results[0][2]))
    return respond(request, dict(error_code=ErrorCode.none, members=members))
