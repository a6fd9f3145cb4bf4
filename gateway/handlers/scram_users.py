"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): SASL/SCRAM users.

Clients send the salted password and salt (never the password); the gateway keeps
StoredKey and ServerKey. Describing shows mechanisms and iterations only.
"""

from __future__ import annotations

from collections import defaultdict

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..security.acl import Operation
from ..security.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted, mechanism_code, mechanism_name
from .base import register, respond

# Kafka leaves these unbounded; a user name is a principal name and a salt is a few dozen
# bytes (Kafka's own tools use 64), so larger ones are refused before they are stored.
MAX_USER_NAME = 512
MAX_SALT_BYTES = 1024


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, error_message=None, results=[]))


@register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, error=_describe_error)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.DESCRIBE):
        return _describe_error(request, ErrorCode.cluster_authorization_failed)
    users = ctx.access.store.users
    names = sorted(users) if not request.body.users else [user.name for user in request.body.users]
    results: list[dict] = []
    for name in dict.fromkeys(names):
        mechanisms = users.get(name)
        if names.count(name) > 1:
            results.append(dict(user=name, error_code=ErrorCode.duplicate_resource,
                                error_message="user named more than once", credential_infos=[]))
        elif not mechanisms:
            results.append(dict(user=name, error_code=ErrorCode.resource_not_found,
                                error_message="no SCRAM credentials for this user", credential_infos=[]))
        else:
            results.append(dict(user=name, error_code=ErrorCode.none, error_message=None, credential_infos=[
                dict(mechanism=mechanism_code(m), iterations=c.iterations) for m, c in sorted(mechanisms.items())]))
    return respond(request, dict(error_code=ErrorCode.none, error_message=None, results=results))


def _alter_error(request: Request, code: ErrorCode):
    names = dict.fromkeys([d.name for d in request.body.deletions] + [u.name for u in request.body.upsertions])
    return respond(request, dict(results=[dict(user=name, error_code=code, error_message=None) for name in names]))


@register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, error=_alter_error)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Request):
    if not ctx.access.allowed_cluster(Operation.ALTER):
        return _alter_error(request, ErrorCode.cluster_authorization_failed)
    body = request.body
    errors: dict[str, tuple[ErrorCode, str]] = {}
    upserts, deletes = defaultdict(list), defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for item in [*body.deletions, *body.upsertions]:
        mechanism = mechanism_name(item.mechanism)
        if not item.name:
            errors[item.name] = (ErrorCode.unacceptable_credential, "empty user name")
        elif len(item.name) > MAX_USER_NAME:
            errors[item.name] = (ErrorCode.unacceptable_credential, f"user name longer than {MAX_USER_NAME} characters")
        elif mechanism is None:
            errors[item.name] = (ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {item.mechanism}")
        elif (item.name, item.mechanism) in seen:
            errors[item.name] = (ErrorCode.duplicate_resource, "a user and mechanism named more than once")
        seen.add((item.name, item.mechanism))
    for item in body.upsertions:
        if item.name in errors:
            continue
        if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            errors[item.name] = (ErrorCode.unacceptable_credential,
                                 f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}")
        elif not item.salt or not item.salted_password:
            errors[item.name] = (ErrorCode.unacceptable_credential, "salt and salted password must not be empty")
        elif len(item.salt) > MAX_SALT_BYTES:
            errors[item.name] = (ErrorCode.unacceptable_credential, f"salt longer than {MAX_SALT_BYTES} bytes")
        else:
            mechanism = mechanism_name(item.mechanism)
            assert mechanism is not None  # unknown mechanisms were refused above
            upserts[item.name].append(credential_from_salted(mechanism, item.salted_password, item.salt,
                                                             item.iterations))
    for item in body.deletions:
        if item.name in errors:
            continue
        mechanism = mechanism_name(item.mechanism)
        if mechanism not in ctx.access.store.users.get(item.name, {}):
            errors[item.name] = (ErrorCode.resource_not_found, f"{item.name} has no {mechanism} credential")
        else:
            deletes[item.name].append(mechanism)
    names = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    results = []
    for name in names:
        if name in errors:  # a user's changes are applied all or none
            code, message = errors[name]
            results.append(dict(user=name, error_code=code, error_message=message))
            continue
        await ctx.access.store.alter_user(name, upserts.get(name, ()), deletes.get(name, ()))
        results.append(dict(user=name, error_code=ErrorCode.none, error_message=None))
    return respond(request, dict(results=results))
