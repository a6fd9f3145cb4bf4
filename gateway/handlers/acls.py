"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): Kafka's ACLs, kept in the metadata store.

Changing ACLs needs ALTER on the cluster, reading them DESCRIBE, as in Kafka. In a
cluster the change is one etcd transaction the other gateways see through their watch.
"""

from __future__ import annotations

import enum
from collections import defaultdict

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import AclBinding, AclFilter, InvalidAcl, Operation, PatternType, Permission, ResourceType
from .base import register, respond


def _code(kind: type[enum.IntEnum], value: int):
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validation


def _binding(item) -> AclBinding:
    return AclBinding(_code(ResourceType, item.resource_type), item.resource_name,
                      _code(PatternType, item.resource_pattern_type), item.principal, item.host,
                      _code(Operation, item.operation), _code(Permission, item.permission_type))


def _filter(item) -> AclFilter:
    return AclFilter(_code(ResourceType, item.resource_type_filter), item.resource_name_filter,
                     _code(PatternType, item.pattern_type_filter), item.principal_filter, item.host_filter,
                     _code(Operation, item.operation), _code(Permission, item.permission_type))


def _create_error(request: Request, code: ErrorCode):
    return respond(request, dict(results=[dict(error_code=code, error_message=None)
                                          for _ in request.body.creations]))


@register(ApiKey.CREATE_ACLS, error=_create_error)
async def handle_create_acls(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.ALTER):
        return _create_error(request, ErrorCode.cluster_authorization_failed)
    results: list[dict] = []
    valid: list[AclBinding] = []
    for item in request.body.creations:
        try:
            valid.append(_binding(item).validate())
            results.append(dict(error_code=ErrorCode.none, error_message=None))
        except InvalidAcl as exc:
            results.append(dict(error_code=ErrorCode.invalid_request, error_message=str(exc)))
    await ctx.access.store.add_acls(valid)
    return respond(request, dict(results=results))


def _describe_error(request: Request, code: ErrorCode, message: str | None = None):
    return respond(request, dict(error_code=code, error_message=message, resources=[]))


@register(ApiKey.DESCRIBE_ACLS, error=_describe_error)
async def handle_describe_acls(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.DESCRIBE):
        return _describe_error(request, ErrorCode.cluster_authorization_failed, "DESCRIBE on the cluster is not allowed")
    try:
        wanted = AclFilter(_code(ResourceType, request.body.resource_type_filter), request.body.resource_name_filter,
                           _code(PatternType, request.body.pattern_type_filter), request.body.principal_filter,
                           request.body.host_filter, _code(Operation, request.body.operation),
                           _code(Permission, request.body.permission_type)).validate()
    except InvalidAcl as exc:
        return _describe_error(request, ErrorCode.invalid_request, str(exc))
    resources: dict[tuple, list[dict]] = defaultdict(list)
    for acl in sorted(ctx.access.store.acls.values(), key=AclBinding.to_json):
        if wanted.matches(acl):
            resources[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(dict(
                principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission))
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, resources=[
        dict(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls)
        for (rtype, name, pattern), acls in resources.items()]))


def _delete_error(request: Request, code: ErrorCode):
    return respond(request, dict(filter_results=[dict(error_code=code, error_message=None, matching_acls=[])
                                                 for _ in request.body.filters]))


@register(ApiKey.DELETE_ACLS, error=_delete_error)
async def handle_delete_acls(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.ALTER):
        return _delete_error(request, ErrorCode.cluster_authorization_failed)
    current = list(ctx.access.store.acls.values())
    results: list[dict] = []
    doomed: dict[AclBinding, None] = {}  # an ordered set
    for item in request.body.filters:
        try:
            wanted = _filter(item).validate()
        except InvalidAcl as exc:
            results.append(dict(error_code=ErrorCode.invalid_request, error_message=str(exc), matching_acls=[]))
            continue
        matching = [acl for acl in current if wanted.matches(acl)]
        doomed.update((acl, None) for acl in matching)
        results.append(dict(error_code=ErrorCode.none, error_message=None, matching_acls=[
            dict(error_code=ErrorCode.none, error_message=None, resource_type=acl.resource_type,
                 resource_name=acl.resource_name, pattern_type=acl.pattern_type, principal=acl.principal,
                 host=acl.host, operation=acl.operation, permission_type=acl.permission) for acl in matching]))
    await ctx.access.store.remove_acls(list(doomed))
    return respond(request, dict(filter_results=results))
