"""One connection's authentication state, changed only through its transitions.

A connection on a SASL listener starts awaiting a handshake; one on any other listener
starts authenticated (as ANONYMOUS, or the principal of its TLS client certificate).
Every change is an event checked against :data:`TRANSITIONS`: the authenticator
(:class:`~.access.Access`) sends the handshake, the authentication and failures, the
wire (:class:`~kafscale.gateway.wire.KafkaWire`) the passage of time, and anything the
table does not allow fails the session. A failed session answers the request that
failed it, then its connection closes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..config import Listener
from .scram import ScramExchange

__all__ = ["ANONYMOUS", "Session", "SessionState", "SessionEvent", "TRANSITIONS", "IllegalTransition"]

ANONYMOUS = "User:ANONYMOUS"


class SessionState(enum.Enum):
    AWAITING_HANDSHAKE = "awaiting handshake"  # a SASL listener's connection, before its SaslHandshake
    AUTHENTICATING = "authenticating"  # a mechanism chosen: its tokens are expected
    AUTHENTICATED = "authenticated"
    EXPIRED = "expired"  # the SASL session's lifetime ended (KIP-368): only a new login may follow
    REAUTHENTICATING = "re-authenticating"  # KIP-368: a new exchange on an authenticated connection
    FAILED = "failed"  # answer the request that failed it, then close


class SessionEvent(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATED = "authenticated"
    LIFETIME_ENDED = "lifetime ended"
    FAILED = "failed"


S, E = SessionState, SessionEvent
TRANSITIONS: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (S.AWAITING_HANDSHAKE, E.HANDSHAKE): S.AUTHENTICATING,
    (S.AUTHENTICATING, E.AUTHENTICATED): S.AUTHENTICATED,
    (S.AUTHENTICATED, E.HANDSHAKE): S.REAUTHENTICATING,
    (S.AUTHENTICATED, E.LIFETIME_ENDED): S.EXPIRED,
    (S.EXPIRED, E.HANDSHAKE): S.REAUTHENTICATING,
    (S.REAUTHENTICATING, E.AUTHENTICATED): S.AUTHENTICATED,
    **{(state, E.FAILED): S.FAILED for state in SessionState},
}
del S, E


class IllegalTransition(Exception):
    """An event the session's state does not allow; the session has failed."""


@dataclass
class Session:
    """Who is on one connection, and how far its login has come."""

    listener: Listener
    host: str
    principal: str = ANONYMOUS
    state: SessionState = SessionState.AUTHENTICATED
    mechanism: str | None = None  # chosen by the last SaslHandshake
    exchange: ScramExchange | None = field(default=None, repr=False)  # a SCRAM exchange under way
    expires_at: float | None = None  # trio time the SASL session's lifetime ends (KIP-368)
    raw_tokens: bool = False  # SaslHandshake v0: this exchange's tokens arrive as bare frames

    @classmethod
    def start(cls, listener: Listener, host: str, principal: str = ANONYMOUS) -> Session:
        state = SessionState.AWAITING_HANDSHAKE if listener.sasl else SessionState.AUTHENTICATED
        return cls(listener, host, principal, state)

    # -- questions -------------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """Whether the client logged in (or needs not): its frames may be as large as any."""
        return self.state in (SessionState.AUTHENTICATED, SessionState.EXPIRED, SessionState.REAUTHENTICATING)

    @property
    def closing(self) -> bool:
        return self.state is SessionState.FAILED

    @property
    def exchanging(self) -> bool:
        """Whether SASL tokens are expected (after a handshake, before the login completes)."""
        return self.state in (SessionState.AUTHENTICATING, SessionState.REAUTHENTICATING)

    @property
    def receiving_raw_tokens(self) -> bool:
        return self.raw_tokens and self.exchanging

    def allows(self, event: SessionEvent) -> bool:
        return (self.state, event) in TRANSITIONS

    # -- transitions -----------------------------------------------------------------------

    def _move(self, event: SessionEvent) -> None:
        following = TRANSITIONS.get((self.state, event))
        if following is None:
            was, self.state = self.state, SessionState.FAILED
            raise IllegalTransition(f"{event.value} while {was.value}")
        self.state = following

    def handshake(self, mechanism: str, *, raw_tokens: bool) -> None:
        """SaslHandshake chose ``mechanism``; ``raw_tokens`` after v0, whose tokens follow bare."""
        self._move(SessionEvent.HANDSHAKE)
        self.mechanism, self.exchange, self.raw_tokens = mechanism, None, raw_tokens

    def exchange_started(self, exchange: ScramExchange) -> None:
        if not self.exchanging:
            was = self.state
            self.fail()
            raise IllegalTransition(f"a SASL exchange while {was.value}")
        self.exchange = exchange

    def authenticated_as(self, principal: str, expires_at: float | None) -> None:
        self._move(SessionEvent.AUTHENTICATED)
        self.principal, self.exchange, self.expires_at, self.raw_tokens = principal, None, expires_at, False

    def tick(self, now: float) -> None:
        """The time is ``now`` (trio time): an authenticated session whose lifetime ended expires."""
        if self.state is SessionState.AUTHENTICATED and self.expires_at is not None and now >= self.expires_at:
            self._move(SessionEvent.LIFETIME_ENDED)

    def fail(self) -> None:
        self._move(SessionEvent.FAILED)
