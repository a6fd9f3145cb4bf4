"""A connection's authentication state: its transitions, checked against the table."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafscale.gateway.config import Listener
from kafscale.gateway.security.session import (
    TRANSITIONS,
    IllegalTransition,
    Session,
    SessionEvent,
    SessionState,
)

SASL = Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0)
PLAINTEXT = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)


def test_a_sasl_login_and_a_re_authentication():
    session = Session.start(SASL, "10.0.0.1")
    assert session.state is SessionState.AWAITING_HANDSHAKE and not session.authenticated
    session.handshake("SCRAM-SHA-256", raw_tokens=False)
    assert session.exchanging and not session.authenticated
    session.authenticated_as("User:alice", expires_at=10.0)
    assert session.state is SessionState.AUTHENTICATED and session.principal == "User:alice"
    session.tick(9.9)
    assert session.state is SessionState.AUTHENTICATED
    session.tick(10.0)
    assert session.state is SessionState.EXPIRED and session.authenticated
    session.handshake("SCRAM-SHA-256", raw_tokens=False)
    assert session.state is SessionState.REAUTHENTICATING
    session.authenticated_as("User:alice", expires_at=20.0)
    assert session.state is SessionState.AUTHENTICATED and session.expires_at == 20.0


def test_raw_tokens_last_for_their_exchange_only():
    session = Session.start(SASL, "10.0.0.1")
    session.handshake("PLAIN", raw_tokens=True)
    assert session.receiving_raw_tokens
    session.authenticated_as("User:bob", expires_at=None)
    assert not session.receiving_raw_tokens


def test_a_listener_without_sasl_starts_authenticated_as_its_principal():
    session = Session.start(PLAINTEXT, "10.0.0.1", "User:CN=client")
    assert session.state is SessionState.AUTHENTICATED and session.principal == "User:CN=client"


@pytest.mark.parametrize("state", [SessionState.AWAITING_HANDSHAKE, SessionState.AUTHENTICATED, SessionState.FAILED])
def test_an_authentication_without_a_handshake_fails_the_session(state):
    session = Session(SASL, "h", state=state)
    with pytest.raises(IllegalTransition):
        session.authenticated_as("User:eve", expires_at=None)
    assert session.state is SessionState.FAILED and session.closing


def test_a_second_handshake_in_one_exchange_fails_the_session():
    session = Session.start(SASL, "h")
    session.handshake("PLAIN", raw_tokens=False)
    with pytest.raises(IllegalTransition, match="handshake while authenticating"):
        session.handshake("PLAIN", raw_tokens=False)
    assert session.closing


@given(st.lists(st.sampled_from(list(SessionEvent)), max_size=12), st.sampled_from([SASL, PLAINTEXT]))
def test_any_sequence_of_events_follows_the_table(events, listener):
    session = Session.start(listener, "h")
    for event in events:
        before, lifetime = session.state, session.expires_at
        try:
            if event is SessionEvent.HANDSHAKE:
                session.handshake("PLAIN", raw_tokens=False)
            elif event is SessionEvent.AUTHENTICATED:
                session.authenticated_as("User:a", expires_at=1.0)
            elif event is SessionEvent.LIFETIME_ENDED:
                session.tick(2.0)
            else:
                session.fail()
        except IllegalTransition:
            assert (before, event) not in TRANSITIONS and session.state is SessionState.FAILED
            continue
        expected = TRANSITIONS.get((before, event))
        if event is SessionEvent.LIFETIME_ENDED and (expected is None or lifetime is None):
            expected = before  # time passing changes only a session whose lifetime can end
        assert session.state is expected
    # Nothing leaves the failed state.
    assert all(TRANSITIONS[(SessionState.FAILED, e)] is SessionState.FAILED
               for e in SessionEvent if (SessionState.FAILED, e) in TRANSITIONS)
