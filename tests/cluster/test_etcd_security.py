"""etcd over TLS with client certificates and etcd's own auth (user, password, token): the
client against a real etcd run that way, and gateways sharing one."""

from __future__ import annotations

from contextlib import aclosing

import pytest
import trio
from confluent_kafka import Consumer, Producer

from devkit.certs import CertificateAuthority
from devkit.etcd_server import EtcdServer
from devkit.ports import free_port
from kafscale.gateway.etcd import EtcdAuthFailed, EtcdClient, EtcdError, EtcdUnavailable, tls_context
from tests.cluster.conftest import LEASE_MS, wait_until
from tests.support.gateway_process import GatewayProcess
from tests.support.httpx_streams import IGNORE_ABANDONED_STREAMS

pytestmark = IGNORE_ABANDONED_STREAMS

TOKEN_TTL_S = 1  # etcd's --auth-token-ttl: tokens unused this long expire


@pytest.fixture
def secure_etcd(tmp_path):
    """etcd requiring TLS client certificates, with auth on and a user ``gateway``."""
    ca = CertificateAuthority(tmp_path / "ca")
    server = EtcdServer(tmp_path, ca=ca, auth_token_ttl_s=TOKEN_TTL_S).start()
    server.enable_auth({"gateway": "gateway-secret"})
    yield server
    server.stop()


def _client(server: EtcdServer, password: str = "gateway-secret", **tls) -> EtcdClient:
    tls = tls or {"cafile": str(server.ca.cert_path), "certfile": str(server.client_cert.cert),
                  "keyfile": str(server.client_cert.key)}
    return EtcdClient([server.endpoint], 5000, tls=tls_context(**tls), username="gateway", password=password)


async def test_calls_log_in_and_outlive_expired_tokens(secure_etcd):
    client = _client(secure_etcd)
    try:
        await client.put("/kafscale/a", b"1")
        lease = await client.lease_grant(10)
        assert await client.lease_keepalive(lease) > 0
        first_token = client._token
        await trio.sleep(TOKEN_TTL_S + 2.5)  # unused, the token expires (etcd checks expiry each second)
        ok, _ = await client.txn([], [{"request_put": {"key": "L2thZnNjYWxlL2I=", "value": "Mg=="}}])
        assert ok
        assert client._token != first_token, "the call after expiry did not log in again"
        assert (await client.get("/kafscale/b")).value == b"2"

        # A watch opened with an expired token is cancelled by etcd; the client logs in again
        # so the caller's re-watch (what the cluster view does) gets the changes.
        await trio.sleep(TOKEN_TTL_S + 2.5)
        with pytest.raises(EtcdError, match="permission denied"):
            async with aclosing(client.watch_prefix("/kafscale/", 1)) as watch:
                async for _ in watch:
                    pass
        with trio.fail_after(10):
            async with aclosing(client.watch_prefix("/kafscale/", 1)) as watch:
                async for events in watch:
                    assert {e.kv.key for e in events} >= {"/kafscale/a"}
                    break
        assert secure_etcd.get_prefix("/kafscale/")["/kafscale/a"] == b"1"
    finally:
        await client.aclose()


async def test_refusals_are_clear_errors(secure_etcd):
    ca = str(secure_etcd.ca.cert_path)
    cert, key = str(secure_etcd.client_cert.cert), str(secure_etcd.client_cert.key)
    named = secure_etcd.ca.issue("named", "gateway")
    wrong_password = _client(secure_etcd, password="not-it")
    allowed = _client(secure_etcd)
    no_certificate = _client(secure_etcd, cafile=ca)
    unknown_server = _client(secure_etcd, certfile=cert, keyfile=key)  # the system CAs do not know etcd's
    named_certificate = _client(secure_etcd, cafile=ca, certfile=str(named.cert), keyfile=str(named.key))
    nameless = EtcdClient([secure_etcd.endpoint], 5000, tls=tls_context(ca, cert, key))  # no user configured
    try:
        with pytest.raises(EtcdAuthFailed, match="set etcd_username"):
            await nameless.get("/kafscale/a")

        with pytest.raises(EtcdAuthFailed) as refused:
            await wrong_password.get("/kafscale/a")
        assert "'gateway'" in str(refused.value) and "invalid user ID or password" in str(refused.value)
        assert "not-it" not in str(refused.value)

        with pytest.raises(EtcdError, match="permission denied"):
            await allowed.put("/elsewhere/a", b"1")  # the role grants /kafscale only
        with pytest.raises(EtcdUnavailable, match="BAD_CERTIFICATE"):
            await no_certificate.get("/kafscale/a")
        with pytest.raises(EtcdUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            await unknown_server.get("/kafscale/a")
        # etcd's JSON gateway refuses a certificate naming a user, so the identity is the password's.
        with pytest.raises(EtcdError, match="CommonName"):
            await named_certificate.get("/kafscale/a")
    finally:
        for client in (wrong_password, allowed, no_certificate, unknown_server, named_certificate, nameless):
            await client.aclose()


def _etcd_args(server: EtcdServer) -> list[str]:
    return ["--etcd-endpoints", server.endpoint, "--etcd-cafile", str(server.ca.cert_path),
            "--etcd-certfile", str(server.client_cert.cert), "--etcd-keyfile", str(server.client_cert.key),
            "--etcd-username", "gateway"]


def test_gateways_share_a_tls_etcd_with_auth(tmp_path, secure_etcd, moto_server):
    """Two gateways whose only metadata store is the secured etcd, each with a PLAINTEXT and
    an SSL listener: one topic's records produced over PLAINTEXT, read back over SSL; the
    password comes from the environment and never reaches the logs."""
    server = secure_etcd.ca.issue("gateway-server", "localhost", server=True)
    ssl_ports = [free_port(), free_port()]
    gateways = []
    for node in range(2):
        plain = free_port()
        gateways.append(GatewayProcess(
            tmp_path / f"gw{node}", "--storage", moto_server.location(), *moto_server.gateway_args(),
            "--node-id", str(node), *_etcd_args(secure_etcd), "--lease-ttl-ms", str(LEASE_MS),
            "--cluster-refresh-ms", "200", "--default-partitions", "2",
            "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_ports[node]}",
            "--ssl-certfile", str(server.cert), "--ssl-keyfile", str(server.key),
            port=plain, env={"KAFSCALE_ETCD_PASSWORD": "gateway-secret"}))
    try:
        for gateway in gateways:
            gateway.start()
        bootstrap = ",".join(g.bootstrap for g in gateways)
        producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20_000})
        failures = []
        for i in range(20):
            producer.produce("secured", str(i).encode(), partition=i % 2,
                             on_delivery=lambda err, _: err and failures.append(err))
        assert producer.flush(30) == 0 and not failures
        consumer = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ssl_ports),
                             "security.protocol": "SSL", "ssl.ca.location": str(secure_etcd.ca.cert_path),
                             "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["secured"])
        seen: set[bytes] = set()
        wait_until(lambda: _poll_into(consumer, seen) >= 20, 60, lambda: f"read back only {sorted(seen)}")
        consumer.close()
        assert "/kafscale/kafscale/topics/secured" in secure_etcd.get_prefix("/kafscale/kafscale/topics/")
        for gateway in gateways:
            assert "gateway-secret" not in gateway.logs()
    finally:
        for gateway in gateways:
            gateway.kill()


def _poll_into(consumer: Consumer, seen: set[bytes]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        seen.add(message.value())
    return len(seen)


def test_a_wrong_etcd_password_stops_the_start_with_a_clear_message(tmp_path, secure_etcd):
    gateway = GatewayProcess(tmp_path / "gw", *_etcd_args(secure_etcd), env={"KAFSCALE_ETCD_PASSWORD": "guess"})
    with pytest.raises(RuntimeError, match="gateway exited") as failed:
        gateway.start()
    assert "etcd refused user 'gateway'" in str(failed.value)
    assert "guess" not in gateway.logs()
