"""DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..groups.classic import GroupState
from ..groups.consumer import ConsumerGroup
from ..security.acl import Operation, ResourceType
from .base import register, respond


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(groups=[
        dict(error_code=code, group_id=g, group_state="", protocol_type="", protocol_data="", members=[])
        for g in request.body.groups
    ]))


@register(ApiKey.DESCRIBE_GROUPS, error=_describe_error)
async def handle_describe_groups(ctx: RequestContext, request: Request):
    described = []
    for group_id in request.body.groups:
        try:
            ctx.access.require_group(Operation.DESCRIBE, group_id)
            ctx.groups.check_coordinator(group_id)
        except KafkaError as exc:
            described.append(dict(error_code=exc.code, group_id=group_id, group_state="", protocol_type="",
                                  protocol_data="", members=[]))
            continue
        group = ctx.groups.groups.get(group_id)
        if group is None and ctx.shares.knows(group_id):  # as Kafka: described by ShareGroupDescribe
            described.append(dict(error_code=ErrorCode.group_id_not_found, group_id=group_id, group_state="",
                                  protocol_type="", protocol_data="", members=[],
                                  error_message=f"group {group_id!r} is not a classic group"))
            continue
        if group is None:
            described.append(dict(error_code=ErrorCode.none, group_id=group_id, group_state=GroupState.DEAD.value,
                                  protocol_type="", protocol_data="", members=[]))
            continue
        if isinstance(group, ConsumerGroup):  # as Kafka: described by ConsumerGroupDescribe
            described.append(dict(error_code=ErrorCode.group_id_not_found, group_id=group_id, group_state="",
                                  protocol_type="", protocol_data="", members=[],
                                  error_message=f"group {group_id!r} is not a classic group"))
            continue
        stable = group.state == GroupState.STABLE
        members = [
            dict(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                 client_host=m.client_host, member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                 member_assignment=m.assignment if stable else b"")
            for m in group.members.values()
        ]
        described.append(dict(error_code=ErrorCode.none, group_id=group_id, group_state=group.state.value,
                              protocol_type=group.protocol_type or "",
                              protocol_data=(group.protocol_name or "") if stable else "", members=members))
    if getattr(request.body, "include_authorized_operations", False):  # v3+
        for entry in described:
            if entry["error_code"] == ErrorCode.none:
                entry["authorized_operations"] = ctx.access.authorized_operations(ResourceType.GROUP,
                                                                                  entry["group_id"])
    return respond(request, dict(groups=described))


@register(ApiKey.LIST_GROUPS, error=lambda request, code: respond(request, dict(error_code=code, groups=[])))
async def handle_list_groups(ctx: RequestContext, request: Request):
    wanted = {s.lower() for s in getattr(request.body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request.body, "types_filter", ()) or ()}  # v5 (KIP-848)
    everything = ctx.access.allowed_cluster(Operation.DESCRIBE, quiet=True)  # else: the groups it may describe
    groups = [
        dict(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
             group_type=g.kind)
        for g in sorted(ctx.groups.groups.values(), key=lambda g: g.group_id)
        if (not wanted or g.state.value.lower() in wanted) and (not types or g.kind in types)
        and (everything or ctx.access.allowed_group(Operation.DESCRIBE, g.group_id, quiet=True))
    ]
    for group_id, state in sorted(ctx.shares.listed().items()):  # share groups (KIP-932)
        if (wanted and state.lower() not in wanted) or (types and "share" not in types) or not _coordinated(ctx, group_id):
            continue
        if everything or ctx.access.allowed_group(Operation.DESCRIBE, group_id, quiet=True):
            groups.append(dict(group_id=group_id, protocol_type="share", group_state=state, group_type="share"))
    return respond(request, dict(error_code=ErrorCode.none, groups=groups))


def _coordinated(ctx: RequestContext, group_id: str) -> bool:
    try:
        ctx.groups.check_coordinator(group_id)
    except KafkaError:
        return False
    return True


@register(ApiKey.DELETE_GROUPS, error=lambda request, code: respond(request, dict(results=[
    dict(group_id=g, error_code=code) for g in request.body.groups_names])))
async def handle_delete_groups(ctx: RequestContext, request: Request):
    results = []
    for group_id in request.body.groups_names:
        try:
            ctx.access.require_group(Operation.DELETE, group_id)
            if ctx.shares.knows(group_id):
                ctx.groups.check_coordinator(group_id)
                await ctx.shares.delete_group(group_id)
            else:
                await ctx.groups.delete_group(group_id)
            code = ErrorCode.none
        except KafkaError as exc:
            code = exc.code
        results.append(dict(group_id=group_id, error_code=code))
    return respond(request, dict(results=results))
