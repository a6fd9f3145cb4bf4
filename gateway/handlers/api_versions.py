"""ApiVersions (18): what we serve, from the handler registry."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import Request, response_class

from ..context import RequestContext
from .base import advertised_versions, register, respond


def _api_keys() -> list[dict]:
    return [dict(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in advertised_versions()]


def unsupported_version_response(correlation_version: int):
    """Kafka's answer to an ApiVersions version it does not know: a v0 body with
    UNSUPPORTED_VERSION and the full list, so the client can retry at a version we have."""
    return build(response_class(ApiKey.API_VERSIONS, 0), dict(error_code=ErrorCode.unsupported_version, api_keys=_api_keys()))


def _error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, api_keys=_api_keys()))


@register(ApiKey.API_VERSIONS, error=_error)
async def handle_api_versions(ctx: RequestContext, request: Request):
    fields = dict(error_code=ErrorCode.none, api_keys=_api_keys())
    if request.header.api_version >= 3:  # the feature levels are v3's tagged fields
        fields.update(ctx.gateway.features.api_versions_fields())
    return respond(request, fields)
