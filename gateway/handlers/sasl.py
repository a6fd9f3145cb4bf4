"""SaslHandshake (17) and SaslAuthenticate (36): SASL PLAIN and SCRAM over Kafka frames.

Both are ordered: the connection reads nothing else until one is answered, so a
session is authenticated (or closing) before the next request is looked at.
After SaslHandshake v0 (clients before Kafka 1.0, and librdkafka's feature check
requires it to be offered) the tokens follow as bare size-prefixed frames, outside
the Kafka protocol: the connection hands them to ``Access.authenticate`` itself.
"""

from __future__ import annotations

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from .base import Ready, register, respond


def _handshake_error(request: Request, code: ErrorCode):
    return respond(request, dict(error_code=code, mechanisms=[]))


@register(ApiKey.SASL_HANDSHAKE, error=_handshake_error, ordered=True)
async def handle_sasl_handshake(ctx: RequestContext, request: Request) -> Ready:
    code = ctx.access.handshake(request.body.mechanism, raw_tokens=request.header.api_version == 0)
    return Ready(respond(request, dict(error_code=code, mechanisms=list(ctx.access.mechanisms))))


def _authenticate_error(request: Request, code: ErrorCode, message: str | None = None):
    # Any failure ends the connection, as in Kafka (registered with closes_on_error).
    return respond(request, dict(error_code=code, error_message=message, auth_bytes=b"", session_lifetime=0))


@register(ApiKey.SASL_AUTHENTICATE, error=_authenticate_error, ordered=True, closes_on_error=True)
async def handle_sasl_authenticate(ctx: RequestContext, request: Request) -> Ready:
    try:
        with trio.fail_at(ctx.deadline):  # an ordered handler bounds its own waits
            token, lifetime_ms = await ctx.access.authenticate(request.body.auth_bytes)
    except KafkaError as exc:  # the authenticator failed the session: answered, then closed
        return Ready(_authenticate_error(request, exc.code, str(exc)))
    return Ready(respond(request, dict(error_code=ErrorCode.none, error_message=None, auth_bytes=token,
                                       session_lifetime=lifetime_ms)))
