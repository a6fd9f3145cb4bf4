"""SASL PLAIN (RFC 4616): one message, ``authzid NUL authcid NUL password``."""

from __future__ import annotations

from .scram import AuthenticationFailed

__all__ = ["parse_plain"]

_MAX_FIELD = 1024  # a longer name or password is refused without being looked at


def parse_plain(message: bytes) -> tuple[str, str]:
    """The user name and password of a PLAIN message; the authorization id, when given,
    must be the user itself (as Kafka requires)."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed("malformed PLAIN message")
    try:
        authzid, username, password = (part.decode() for part in parts)
    except UnicodeDecodeError as exc:
        raise AuthenticationFailed("PLAIN message is not UTF-8") from exc
    if not username or not password or len(username) > _MAX_FIELD or len(password) > _MAX_FIELD:
        raise AuthenticationFailed("PLAIN user name and password must not be empty")
    if authzid and authzid != username:
        raise AuthenticationFailed("authorization id differs from the user name")
    return username, password
