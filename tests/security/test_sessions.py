"""Connection-level authentication behaviour on an in-process gateway (raw frames)."""

from __future__ import annotations

import trio
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from devkit.wire_client import Client
from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.server import serve
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import request_class


def _config(**overrides) -> GatewayConfig:
    """One SASL_PLAINTEXT listener, user admin with password pw."""
    return GatewayConfig.of(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "http_port": -1, "storage": "memory://",
                            "sasl_bootstrap_user": "admin", "sasl_bootstrap_password": "pw", **overrides}).validate()


async def test_shutdown_does_not_wait_for_a_delayed_authentication_failure():
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve, _config(auth_failure_delay_ms=60_000), shutdown)
        client = await Client.connect(running.port)
        answer = await client.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.none
        await client.send(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0admin\0wrong"), 2)
        await trio.sleep(0.2)  # the failure is being delayed
        started = trio.current_time()
        shutdown.set()
    await client.stream.aclose()
    assert trio.current_time() - started < 5  # not the 60 s delay, nor the 10 s grace period


async def test_kip368_session_lifetime_reauthentication_and_expiry():
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve, _config(connections_max_reauth_ms=400), shutdown)
        client = await Client.connect(running.port)
        for correlation in (1, 3):  # authenticate, then re-authenticate on the same connection
            assert (await client.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"), correlation)).error_code == 0
            answer = await client.call(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0admin\0pw"), correlation + 1)
            assert answer.error_code == ErrorCode.none and answer.session_lifetime.total_seconds() == 0.4
            await trio.sleep(0.25)
            assert (await client.call(18, 3, build(request_class(18, 3), dict(
                client_software_name="t", client_software_version="1")), 9)).error_code == ErrorCode.none
        await trio.sleep(0.3)  # past the lifetime without re-authenticating: closed at the next request
        await client.send(18, 3, build(request_class(18, 3), dict(client_software_name="t",
                                                                  client_software_version="1")), 10)
        assert await client.receive() is None
        # A different mechanism on re-authentication is refused.
        other = await Client.connect(running.port)
        assert (await other.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == 0
        assert (await other.call(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0admin\0pw"), 2)).error_code == 0
        refused = await other.call(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 3)
        assert refused.error_code == ErrorCode.unsupported_sasl_mechanism
        assert await other.receive() is None
        shutdown.set()
    await client.stream.aclose()
    await other.stream.aclose()


async def test_advertised_listeners_name_every_listener_including_the_first():
    config = GatewayConfig.of(listeners="PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0", http_port=-1,
                           storage="memory://", listener_security_protocol_map="OTHER:PLAINTEXT",
                           advertised_listeners="PLAINTEXT://front.example:9999").validate()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve, config, shutdown)
        client = await Client.connect(running.port)
        metadata = build(request_class(3, 12), dict(topics=[], allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False))
        answer = await client.call(3, 12, metadata)
        assert [(b.host, b.port) for b in answer.brokers] == [("front.example", 9999)]
        shutdown.set()
    await client.stream.aclose()
