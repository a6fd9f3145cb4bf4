"""kafscale-admin over SASL_SSL (SCRAM, the CA pinned) as the super user: it creates a SCRAM
user and grants it ACLs; a real client then logs in as that user and is allowed exactly
what was granted; the grants are listed and removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from confluent_kafka import KafkaException, Producer

from tests.security.conftest import ADMIN, ADMIN_PASSWORD


def admin(gateway, *args: str, password: str | None = None, expect: int = 0):
    env = {**os.environ, "KAFSCALE_ADMIN_PASSWORD": ADMIN_PASSWORD}
    if password is not None:
        env["KAFSCALE_ADMIN_USER_PASSWORD"] = password
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", gateway.sasl_ssl, "--json",
                           "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
                           "--sasl-username", ADMIN, "--ssl-cafile", str(gateway.pki.ca.cert_path), *args],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == expect, done.stdout + done.stderr
    return json.loads(done.stdout) if expect == 0 else done


def _produce(gateway, user: str, password: str, topic: str) -> None:
    producer = Producer({**gateway.sasl_config(user, password), "message.timeout.ms": 10_000})
    errors = []
    producer.produce(topic, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    if errors[0] is not None:
        raise KafkaException(errors[0])


def test_admin_makes_a_scram_user_and_grants_it_what_it_may_do(secure_gateway):
    gateway = secure_gateway
    admin(gateway, "users", "upsert", "shipper", "--mechanism", "SCRAM-SHA-512", password="ship-it-42")
    assert {"user": "shipper", "mechanism": "SCRAM-SHA-512", "iterations": 8192} in admin(gateway, "users", "list")
    admin(gateway, "topics", "create", "shipments")
    # No ACL yet: the new user logs in but may not write.
    try:
        _produce(gateway, "shipper", "ship-it-42", "shipments")
        raise AssertionError("a user with no ACL could write")
    except KafkaException as exc:
        assert "authorization" in str(exc).lower()
    admin(gateway, "acls", "create", "--resource-type", "topic", "--resource", "ship", "--pattern", "prefixed",
          "--principal", "User:shipper", "--operation", "write")
    _produce(gateway, "shipper", "ship-it-42", "shipments")
    listed = admin(gateway, "acls", "list", "--principal", "User:shipper")
    assert listed == [{"resource_type": "TOPIC", "resource": "ship", "pattern": "PREFIXED", "principal": "User:shipper",
                       "host": "*", "operation": "WRITE", "permission": "ALLOW"}]
    removed = admin(gateway, "acls", "delete", "--resource-type", "topic", "--resource", "ship", "--pattern", "prefixed",
                    "--principal", "User:shipper")
    assert [row["operation"] for row in removed] == ["WRITE"]
    assert admin(gateway, "acls", "list", "--principal", "User:shipper") == []
    admin(gateway, "users", "delete", "shipper", "--mechanism", "SCRAM-SHA-512")
    assert all(row["user"] != "shipper" for row in admin(gateway, "users", "list"))
    # A password on the command line is refused: it would show in the process list.
    refused = admin(gateway, "users", "upsert", "other", expect=2)
    assert "KAFSCALE_ADMIN_USER_PASSWORD" in refused.stderr


def test_a_wrong_admin_password_is_a_clear_error(secure_gateway):
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", secure_gateway.sasl_ssl,
                           "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
                           "--sasl-username", ADMIN, "--ssl-cafile", str(secure_gateway.pki.ca.cert_path), "brokers"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KAFSCALE_ADMIN_PASSWORD": "wrong"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "authentication" in done.stderr.lower() or "sasl" in done.stderr.lower(), done.stderr


def test_the_console_asks_for_credentials_and_describe_on_the_cluster(secure_gateway):
    import base64
    import urllib.error

    from tests.support import console_page

    gateway = secure_gateway
    admin(gateway, "users", "upsert", "viewer", password="view-only-7")

    def status_of(user: str | None, password: str = "") -> int:
        headers = {} if user is None else {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
        try:
            console_page.fetch(gateway.process.http_port, headers)
            return 200
        except urllib.error.HTTPError as exc:
            return exc.code

    assert status_of(None) == 401  # a SASL listener: anonymous clients are refused
    assert status_of("viewer", "wrong") == 401
    assert status_of("viewer", "view-only-7") == 403  # authenticated, but no DESCRIBE on the cluster
    admin(gateway, "acls", "create", "--resource-type", "cluster", "--resource", "kafka-cluster",
          "--principal", "User:viewer", "--operation", "describe")
    assert status_of("viewer", "view-only-7") == 200
    assert status_of(ADMIN, ADMIN_PASSWORD) == 200  # a super user
