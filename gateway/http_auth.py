"""Who an HTTP client is, and whether it may do what it asks (the LFS endpoint, the console).

Clients authenticate with HTTP Basic (the users and passwords of SASL PLAIN and SCRAM), or
with a client certificate on a TLS listener (http_ssl), mapped to a principal by the SSL
listeners' rules; when any Kafka listener asks for SASL, an unauthenticated client is
refused. The principal is then authorized by the ACLs exactly as a Kafka request of that
principal would be.
"""

from __future__ import annotations

import base64
import binascii

from .config import Listener
from .context import GatewayContext
from .http_exchange import HttpError, HttpExchange
from .security.acl import Operation, ResourceType
from .security.session import ANONYMOUS, Session

__all__ = ["principal_of", "require"]


async def principal_of(ctx: GatewayContext, exchange: HttpExchange) -> str:
    header = exchange.headers.get("authorization", "")
    if not header:
        if exchange.peer.certificate_principal is not None:
            return exchange.peer.certificate_principal  # mTLS on the HTTP listener (http_ssl)
        if any(listener.sasl for listener in ctx.config.network.kafka_listeners):
            raise HttpError(401, "credentials required (HTTP Basic, a SASL user's name and password)")
        return ANONYMOUS
    scheme, _, encoded = header.partition(" ")
    try:
        user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        user = password = ""
    if scheme.lower() != "basic" or not user or not await ctx.access.verify_password(user, password,
                                                                                        exchange.peer.host):
        if not any(listener.sasl for listener in ctx.config.network.kafka_listeners):
            raise HttpError(401, "authentication failed: this gateway has no SASL listener, so clients are "
                                 "anonymous and need no credentials; send none (or use a user it knows)")
        raise HttpError(401, "authentication failed: invalid user name or password")
    return f"User:{user}"



def require(ctx: GatewayContext, exchange: HttpExchange, principal: str, operation: Operation,
            resource_type: ResourceType, name: str) -> None:
    """403 unless the ACLs allow ``principal`` the operation on the resource."""
    listener = Listener("HTTP", "SSL" if exchange.peer.tls else "PLAINTEXT", ctx.config.network.http_host,
                        ctx.config.network.http_port)
    session = Session.start(listener, exchange.peer.host, principal)
    if not ctx.access.allowed(session, operation, resource_type, name):
        raise HttpError(403, f"{principal} may not {operation.name} {resource_type.name.lower()} {name!r}")
