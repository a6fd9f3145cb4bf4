"""What a client can do before it authenticates on a SASL listener: little, and never at the
expense of authenticated clients (issue 20 items 5-8). Raw frames on an in-process gateway."""

from __future__ import annotations

import struct

import trio
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from devkit.wire_client import Client
from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.server import serve
from kafscale.protocol import encode_frame
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import RequestHeader, encode_request, request_class

KIB = 1024


def _config(**overrides) -> GatewayConfig:
    """One SASL_PLAINTEXT listener, user admin with password pw."""
    return GatewayConfig.of(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "http_port": -1, "storage": "memory://",
                            "sasl_bootstrap_user": "admin", "sasl_bootstrap_password": "pw", **overrides}).validate()


def _authenticate_frame(token: bytes) -> bytes:
    return encode_frame(encode_request(RequestHeader(36, 2, 2, "t"), SaslAuthenticateRequest(auth_bytes=token)))


async def _log_in(port: int) -> Client:
    client = await Client.connect(port)
    assert (await client.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))).error_code == ErrorCode.none
    answer = await client.call(36, 2, SaslAuthenticateRequest(auth_bytes=b"\0admin\0pw"), 2)
    assert answer.error_code == ErrorCode.none
    return client


async def _api_versions(client: Client, correlation: int = 9) -> int:
    body = build(request_class(18, 3), dict(client_software_name="t", client_software_version="1"))
    return (await client.call(18, 3, body, correlation)).error_code


async def test_a_huge_sasl_token_closes_the_connection_before_it_is_read(nursery):
    """Item 5: a SCRAM client-first message with a 60 MiB nonce was answered with a 60 MiB
    server-first message and kept for ten minutes; a frame over sasl_max_receive_bytes
    before authentication now closes the connection as soon as its size is read."""
    shutdown = trio.Event()
    running = await nursery.start(serve, _config(), shutdown)
    for mechanism, token in [("SCRAM-SHA-256", b"n,,n=admin,r=" + b"x" * (60 * KIB * KIB)),
                             ("PLAIN", b"\0admin\0" + b"p" * (90 * 10**6))]:
        client = await Client.connect(running.port)
        assert (await client.call(17, 1, SaslHandshakeRequest(mechanism=mechanism))).error_code == ErrorCode.none
        frame = _authenticate_frame(token)
        with trio.fail_after(5):
            try:
                await client.stream.send_all(frame[:1 << 20])  # the size prefix and the first MiB
            except trio.BrokenResourceError:
                pass
            assert await client.receive() is None
        await client.stream.aclose()
    assert running.unauthenticated.used == 0 and running.budget.used == 0
    # Under the frame cap, a client-first message far beyond any real one is refused.
    client = await Client.connect(running.port)
    assert (await client.call(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))).error_code == 0
    answer = await client.call(36, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=admin,r=" + b"x" * (400 * KIB)), 2)
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    await client.stream.aclose()
    shutdown.set()


async def test_unauthenticated_connections_cannot_starve_authenticated_ones(nursery):
    """Item 6: 300 connections announcing 1,000,000-byte frames and 3 announcing 100 MiB,
    never authenticating, reserved 267,857,600 bytes and every authenticated round trip
    failed. Now an announcement over the cap closes the connection, one under it costs
    nothing until its bytes arrive, and bytes that do arrive come from a pool of their own."""
    shutdown = trio.Event()
    running = await nursery.start(serve, _config(unauthenticated_inflight_bytes=4 * KIB * KIB,
                                                 max_inflight_bytes=8 * KIB * KIB), shutdown)
    talker = await _log_in(running.port)
    idlers, senders, closed = [], [], []
    for size in [1_000_000] * 3 + [100 * KIB * KIB] * 3:
        client = await Client.connect(running.port)
        await client.stream.send_all(struct.pack(">i", size))
        closed.append(client)
    for _ in range(300):  # announce just under the cap, send nothing more
        client = await Client.connect(running.port)
        await client.stream.send_all(struct.pack(">i", 500_000))
        idlers.append(client)
    async def send_and_stall(client: Client) -> None:
        try:
            await client.stream.send_all(struct.pack(">i", 500_000) + b"\0" * (400 * KIB))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # closed by the test while the gateway was not reading it (its pool was full)

    for _ in range(20):  # send most of such a frame, then stall: 20 x 400 KiB, twice the pool
        client = await Client.connect(running.port)
        nursery.start_soon(send_and_stall, client)
        senders.append(client)
    with trio.fail_after(5):
        for client in closed:
            assert await client.receive() is None
        await trio.sleep(0.5)
        assert running.budget.used == 0  # the authenticated clients' memory: untouched
        assert running.unauthenticated.used <= 4 * KIB * KIB + 600 * KIB  # the pool, and one share past it
        for correlation in range(10, 20):  # the logged-in client is served at once
            assert await _api_versions(talker, correlation) == ErrorCode.none
        # The pool is full, but a quarter of it is kept for the small frames of real logins.
        assert running.unauthenticated.used > 2.5 * KIB * KIB  # all that large frames may take of 4 MiB
        newcomer = await _log_in(running.port)
        assert await _api_versions(newcomer) == ErrorCode.none
    for client in [*closed, *idlers, *senders, talker, newcomer]:
        await client.stream.aclose()
    with trio.fail_after(5):
        while running.unauthenticated.used or running.budget.used:
            await trio.sleep(0.05)
    shutdown.set()


async def test_mechanism_labels_are_bounded_whatever_clients_send(nursery):
    """Item 7: each unknown mechanism name made its own metric series."""
    shutdown = trio.Event()
    running = await nursery.start(serve, _config(), shutdown)
    for i in range(50):
        client = await Client.connect(running.port)
        answer = await client.call(17, 1, SaslHandshakeRequest(mechanism=f"MADE-UP-{i}"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        await client.stream.aclose()
    await (await _log_in(running.port)).stream.aclose()
    counter = running.context.metrics.authentications
    labels = {sample.labels["mechanism"] for metric in counter.collect() for sample in metric.samples}
    assert labels == {"unknown", "PLAIN"}
    shutdown.set()


async def test_a_second_handshake_mid_exchange_is_an_illegal_state(nursery):
    """Item 8: Kafka answers ILLEGAL_SASL_STATE to a SaslHandshake in the middle of an
    exchange and closes; the gateway switched mechanism."""
    shutdown = trio.Event()
    running = await nursery.start(serve, _config(), shutdown)
    client = await Client.connect(running.port)
    assert (await client.call(17, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))).error_code == 0
    first = await client.call(36, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=admin,r=abcdefgh"), 2)
    assert first.error_code == ErrorCode.none
    again = await client.call(17, 1, SaslHandshakeRequest(mechanism="PLAIN"), 3)
    assert again.error_code == ErrorCode.illegal_sasl_state
    assert await client.receive() is None
    await client.stream.aclose()
    shutdown.set()


async def test_scram_credentials_with_absurd_salts_or_names_are_refused(nursery):
    """Item 8: AlterUserScramCredentials took a 1 MiB salt and a 100,000-character name."""
    shutdown = trio.Event()
    running = await nursery.start(serve, _config(), shutdown)
    admin = await _log_in(running.port)

    def upsert(name: str, salt: bytes):
        return build(request_class(51, 0), dict(deletions=[], upsertions=[dict(
            name=name, mechanism=1, iterations=4096, salt=salt, salted_password=b"s" * 32)]))

    for name, salt in [("u", b"s" * (1 << 20)), ("n" * 100_000, b"salt")]:
        answer = await admin.call(51, 0, upsert(name, salt), 3)
        assert answer.results[0].error_code == ErrorCode.unacceptable_credential
    assert set(running.context.access.store.users) == {"admin"}
    assert (await admin.call(51, 0, upsert("fine", b"salt" * 8), 4)).results[0].error_code == ErrorCode.none
    await admin.stream.aclose()
    shutdown.set()
