"""The Kafka server side of one connection, sans-io: bytes in, events out.

What a connection may read next is decided here, without sockets, tasks or
budgets (:mod:`.connection` does those): frames are cut with the size cap of the
session's state (``sasl_max_receive_bytes`` before authentication), decoded into
requests, and each is either dispatched to its handler or refused:

- on a SASL listener only ApiVersions, SaslHandshake and SaslAuthenticate before
  authentication, and only the SASL APIs once a session has expired or while it
  re-authenticates (KIP-368); anything else is a violation that closes the connection,
  as in Kafka;
- an ApiVersions request at a version this gateway does not serve is answered in v0
  with UNSUPPORTED_VERSION and the served table, so the client retries at one it
  serves; any other unknown API or version is a violation (no answer can be encoded);
- after SaslHandshake v0 the next frame is a bare SASL token, not a request.

Answers leave framed here too (:func:`frame_response`, :func:`frame_token`): the
connection sends the pieces it is given.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import MalformedFrame, ProtocolError, UnsupportedVersion
from kafscale.protocol.framing import FrameDecoder
from kafscale.protocol.messages import (
    Request,
    RequestHeader,
    decode_request,
    encode_response_pieces,
    peek_header,
)
from kafscale.protocol.response_fields import Buffer

from .handlers import REGISTRY, Handler
from .handlers.api_versions import unsupported_version_response
from .security.session import Session, SessionState

__all__ = ["KafkaWire", "Dispatch", "RawToken", "Answer", "Violation", "WireEvent", "frame_response", "frame_token"]

_SIZE = struct.Struct(">i")


def frame_response(header: RequestHeader, body) -> list[Buffer]:
    """The response frame to the request of ``header``: its size, then its pieces (stored
    batches among them, not copied)."""
    pieces = encode_response_pieces(header, body)
    return [_SIZE.pack(sum(len(piece) for piece in pieces)), *pieces]


def frame_token(token: bytes) -> list[Buffer]:
    """The server's SASL token after SaslHandshake v0: a bare size-prefixed frame."""
    return [_SIZE.pack(len(token)), token]

_AUTH_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_BEFORE_AUTH_APIS = _AUTH_APIS | {ApiKey.API_VERSIONS}
# What a session in each state may send, and why anything else closes it (an authenticated
# session may send every API).
_LIMITED: dict[SessionState, tuple[frozenset[int], str]] = {
    SessionState.AWAITING_HANDSHAKE: (_BEFORE_AUTH_APIS, "{api} before SASL authentication"),
    SessionState.AUTHENTICATING: (_BEFORE_AUTH_APIS, "{api} before SASL authentication"),
    SessionState.EXPIRED: (_AUTH_APIS, "SASL session expired without re-authentication (connections_max_reauth_ms)"),
    SessionState.REAUTHENTICATING: (_AUTH_APIS, "{api} during SASL re-authentication"),
    SessionState.FAILED: (frozenset(), "{api} after the session failed"),
}


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A request to run: its handler and the decoded request."""

    handler: Handler
    request: Request


@dataclass(frozen=True, slots=True)
class RawToken:
    """A bare SASL token (after SaslHandshake v0)."""

    token: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    """A response decided here, framed, sent in order with the others."""

    frame: list[Buffer]


@dataclass(frozen=True, slots=True)
class Violation:
    """The client broke the protocol: close the connection (``reason`` is logged)."""

    reason: ProtocolError | UnsupportedVersion


WireEvent = Dispatch | RawToken | Answer | Violation


class KafkaWire:
    def __init__(self, session: Session, max_frame_bytes: int, max_unauthenticated_frame_bytes: int) -> None:
        self.session = session
        self._max_frame = max_frame_bytes
        self._max_unauthenticated_frame = max_unauthenticated_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)

    def receive_data(self, data: bytes | memoryview) -> None:
        self._decoder.feed(data)

    @property
    def pending_size(self) -> int | None:
        """The announced size of the frame being received, once its size prefix is in."""
        return self._decoder.pending_size

    def body_view(self) -> memoryview | None:
        """Where the rest of the pending frame's body can be received directly (see
        :meth:`FrameDecoder.body_view`); the caller holds memory for the whole frame."""
        return self._decoder.body_view()

    def received_into(self, count: int) -> None:
        self._decoder.received_into(count)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet cut into a frame."""
        return self._decoder.buffered

    def next_frame(self) -> bytearray | Violation | None:
        """The next complete frame, a violation (too large, negative size), or ``None`` until
        more bytes arrive. The caller holds memory for it, then asks :meth:`event_for`."""
        self._decoder.max_frame_size = self._max_frame if self.session.authenticated else self._max_unauthenticated_frame
        try:
            return self._decoder.next_frame()
        except ProtocolError as exc:
            return Violation(exc)

    def event_for(self, frame: bytearray, now: float) -> WireEvent:
        """What a complete frame means on this connection at ``now`` (trio time)."""
        if self.session.receiving_raw_tokens:
            return RawToken(bytes(frame))
        try:
            request = decode_request(frame)
        except UnsupportedVersion as exc:
            if exc.api_key != ApiKey.API_VERSIONS:
                return Violation(exc)
            # Answer in v0 so the client can retry at a version we serve.
            header = peek_header(frame)
            return Answer(frame_response(RequestHeader(18, 0, header.correlation_id),
                                         unsupported_version_response(exc.api_version)))
        except MalformedFrame as exc:
            return Violation(exc)
        handler = REGISTRY.get(request.header.api_key)
        if handler is None:
            return Violation(UnsupportedVersion(request.header.api_key, request.header.api_version))
        refusal = self._refusal(request.header.api_key, now)
        if refusal:
            return Violation(ProtocolError(refusal))
        return Dispatch(handler, request)

    def _refusal(self, api_key: int, now: float) -> str | None:
        """Why this request may not be served on this connection now, if it may not."""
        self.session.tick(now)
        limited = _LIMITED.get(self.session.state)
        if limited is None or api_key in limited[0]:
            return None
        return limited[1].format(api=ApiKey(api_key).name)
