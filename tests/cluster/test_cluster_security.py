"""Two gateways sharing etcd and a bucket, each with a SASL_PLAINTEXT listener and the ACL
authorizer: a user created and an ACL changed through one are enforced by the other."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from devkit.ports import free_port
from tests.cluster.conftest import LEASE_MS, wait_until
from tests.support.gateway_process import GatewayProcess


def _sasl(port: int, user: str, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}


def _produce(config: dict, topic: str):
    producer = Producer({**config, "message.timeout.ms": 10_000})
    outcome = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(15)
    return outcome[0] if outcome else "no answer"


def _visible(config: dict) -> bool:
    """Whether gateway ``config`` names shows the topic to the user (Metadata is answered by
    the gateway the client bootstraps from, so this is that gateway's decision)."""
    client = AdminClient(config)
    metadata = client.list_topics(timeout=10)
    return "shared" in metadata.topics


def test_acls_and_users_changed_through_one_gateway_hold_on_the_other(tmp_path, etcd, moto_server):
    location = moto_server.location()
    gateways, sasl_ports = [], []
    for node in range(2):
        plain, sasl = free_port(), free_port()
        sasl_ports.append(sasl)
        gateways.append(GatewayProcess(
            tmp_path / f"gw{node}", "--storage", location, *moto_server.gateway_args(), "--node-id", str(node),
            "--etcd-endpoints", etcd.endpoint, "--lease-ttl-ms", str(LEASE_MS), "--cluster-refresh-ms", "200",
            "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "--authorizer", "acl", "--super-users", "User:admin",
            "--sasl-bootstrap-user", "admin", "--sasl-bootstrap-password", "admin-pw", port=plain,
        ).start())
    try:
        admin = AdminClient(_sasl(sasl_ports[0], "admin", "admin-pw"))
        admin.create_topics([NewTopic("shared", 2)])["shared"].result(15)
        upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              b"carol-pw")
        admin.alter_user_scram_credentials([upsert])["carol"].result(15)
        carol_elsewhere = _sasl(sasl_ports[1], "carol", "carol-pw")

        # Gateway 1 knows carol (from etcd) but no ACL lets her write yet.
        wait_until(lambda: getattr(_produce(carol_elsewhere, "shared"), "code", lambda: None)() ==
                   KafkaError.TOPIC_AUTHORIZATION_FAILED, 30, "gateway 1 never authenticated carol")
        binding = AclBinding(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:carol", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)
        assert not _visible(carol_elsewhere)
        started = time.monotonic()
        admin.create_acls([binding])[binding].result(15)
        wait_until(lambda: _visible(carol_elsewhere), 30, "an ACL created through gateway 0 was not seen by gateway 1")
        allowed_after = time.monotonic() - started
        assert _produce(carol_elsewhere, "shared") is None
        # Both gateways advertise their SASL_PLAINTEXT address to a client of that listener.
        brokers = AdminClient(carol_elsewhere).list_topics(timeout=10).brokers.values()
        assert sorted(broker.port for broker in brokers) == sorted(sasl_ports)
        gone = AclBindingFilter(ResourceType.TOPIC, "shared", ResourcePatternType.LITERAL, "User:carol", None,
                                AclOperation.ANY, AclPermissionType.ANY)
        admin.delete_acls([gone])[gone].result(15)
        wait_until(lambda: not _visible(carol_elsewhere), 30, "a deleted ACL still held on gateway 1")
        print(f"ACL visible on the other gateway after {allowed_after * 1000:.0f} ms")
    finally:
        for gateway in gateways:
            gateway.kill()
