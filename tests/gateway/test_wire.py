"""The sans-io server side of a connection: what each frame means, decided without sockets."""

import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from devkit.wire_client import produce
from kafscale.gateway.config import Listener
from kafscale.gateway.security.session import Session
from kafscale.gateway.wire import Answer, Dispatch, KafkaWire, RawToken, Violation
from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.framing import encode_frame
from kafscale.protocol.messages import RequestHeader, decode_response, encode_request, request_class

PLAINTEXT = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)
SASL = Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0)
API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _wire(listener=PLAINTEXT, max_frame=1 << 20, before_auth=4096):
    return KafkaWire(Session.start(listener, "127.0.0.1"), max_frame, before_auth)


def _frame(api_key, version, body, correlation_id=7):
    return encode_frame(encode_request(RequestHeader(api_key, version, correlation_id, "t"), body))


def _events(wire, data, chunk=3, now=0.0):
    """Feed ``data`` a few bytes at a time; every event it yields at time ``now``."""
    events = []
    for start in range(0, len(data), chunk):
        wire.receive_data(data[start:start + chunk])
        while (frame := wire.next_frame()) is not None:
            events.append(frame if isinstance(frame, Violation) else wire.event_for(frame, now))
            if isinstance(frame, Violation):
                return events
    return events


def test_requests_cut_from_any_chunking_are_dispatched_in_order():
    data = _frame(18, 3, API_VERSIONS, 1) + _frame(0, 9, produce("t", b""), 2) + _frame(18, 3, API_VERSIONS, 3)
    events = _events(_wire(), data)
    assert [type(e) for e in events] == [Dispatch] * 3
    assert [e.request.header.correlation_id for e in events] == [1, 2, 3]
    assert events[1].handler.api_key == ApiKey.PRODUCE


def test_before_sasl_authentication_only_the_login_apis_are_read():
    wire = _wire(SASL)
    events = _events(wire, _frame(18, 3, API_VERSIONS) + _frame(0, 9, produce("t", b"")))
    assert isinstance(events[0], Dispatch)
    assert isinstance(events[1], Violation) and "PRODUCE before SASL authentication" in str(events[1].reason)


def test_frames_before_authentication_are_capped_lower():
    wire = _wire(SASL, max_frame=1 << 20, before_auth=100)
    wire.receive_data(struct.pack(">i", 101))
    assert isinstance(wire.next_frame(), Violation)
    authenticated = _wire(SASL, max_frame=1 << 20, before_auth=100)
    authenticated.session.handshake("PLAIN", raw_tokens=False)
    authenticated.session.authenticated_as("User:alice", expires_at=None)
    authenticated.receive_data(struct.pack(">i", 101))
    assert authenticated.next_frame() is None and authenticated.pending_size == 101


def test_an_expired_session_may_only_authenticate_again():
    wire = _wire(SASL)
    wire.session.handshake("PLAIN", raw_tokens=False)
    wire.session.authenticated_as("User:alice", expires_at=100.0)
    assert isinstance(_events(wire, _frame(18, 3, API_VERSIONS), now=99.0)[0], Dispatch)
    (event,) = _events(wire, _frame(18, 3, API_VERSIONS), now=100.0)
    assert isinstance(event, Violation) and "expired" in str(event.reason)
    (event,) = _events(wire, _frame(17, 1, build(request_class(17, 1), dict(mechanism="PLAIN"))), now=100.0)
    assert isinstance(event, Dispatch)  # SaslHandshake: re-authentication is allowed


def test_api_versions_at_an_unknown_version_is_answered_in_v0_with_the_table():
    (event,) = _events(_wire(), _frame(18, 3, API_VERSIONS)[:6] + struct.pack(">h", 99)
                       + _frame(18, 3, API_VERSIONS)[8:])
    assert isinstance(event, Answer)
    frame = b"".join(bytes(piece) for piece in event.frame)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4  # framed by the wire
    correlation_id, body = decode_response(18, 0, frame[4:])
    assert correlation_id == 7 and body.error_code == ErrorCode.unsupported_version and body.api_keys


@pytest.mark.parametrize("api_key, version", [(0, 99), (999, 0)])
def test_other_unknown_apis_and_versions_close_the_connection(api_key, version):
    frame = bytearray(_frame(18, 3, API_VERSIONS))
    struct.pack_into(">hh", frame, 4, api_key, version)
    (event,) = _events(_wire(), bytes(frame))
    assert isinstance(event, Violation)


def test_garbage_and_negative_sizes_are_violations_not_crashes():
    (event,) = _events(_wire(), encode_frame(b"\x00\x12\x00\x03garbage"))
    assert isinstance(event, Violation)
    wire = _wire()
    wire.receive_data(struct.pack(">i", -5))
    assert isinstance(wire.next_frame(), Violation)


def test_after_a_v0_handshake_the_next_frame_is_a_raw_token():
    wire = _wire(SASL)
    wire.session.handshake("PLAIN", raw_tokens=True)
    (event,) = _events(wire, encode_frame(b"\x00user\x00password"))
    assert event == RawToken(b"\x00user\x00password")
