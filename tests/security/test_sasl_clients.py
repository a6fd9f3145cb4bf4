"""Six independent clients produce and consume over SASL_SSL with SCRAM (and PLAIN)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from tests.e2e.test_sarama import SARAMA_SRC, _build  # noqa: F401  (the Go client's build helper)
from tests.security.conftest import ADMIN, ADMIN_PASSWORD

NODE_DIR = os.path.join(os.path.dirname(__file__), "..", "clients", "node")


def _consume_all(config: dict, topic: str, count: int, group: str) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_over_sasl_ssl(secure_gateway, mechanism):
    config = secure_gateway.sasl_config(mechanism=mechanism)
    topic = f"ck-{mechanism.lower()}"
    producer = Producer({**config, "acks": "all", "enable.idempotence": True})
    acked = []
    for i in range(50):
        producer.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: acked.append((err, msg.offset())))
    assert producer.flush(30) == 0
    assert [err for err, _ in acked] == [None] * 50 and sorted(o for _, o in acked) == list(range(50))
    assert _consume_all(config, topic, 50, f"g-{mechanism}") == [b"v%d" % i for i in range(50)]


def test_confluent_kafka_over_sasl_plaintext(secure_gateway):
    config = {**secure_gateway.sasl_config(), "bootstrap.servers": secure_gateway.sasl_plaintext,
              "security.protocol": "SASL_PLAINTEXT"}
    producer = Producer(config)
    producer.produce("ck-sasl-plaintext", b"x")
    assert producer.flush(30) == 0
    assert _consume_all(config, "ck-sasl-plaintext", 1, "g-sp") == [b"x"]


def _ssl_context(secure_gateway) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(secure_gateway.pki.ca.cert_path))


def test_kafka_python_over_sasl_ssl(secure_gateway):
    from kafka import KafkaConsumer, KafkaProducer

    common = dict(bootstrap_servers=secure_gateway.sasl_ssl, security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ADMIN, sasl_plain_password=ADMIN_PASSWORD,
                  ssl_context=_ssl_context(secure_gateway))
    producer = KafkaProducer(acks="all", **common)
    offsets = [producer.send("kp-sasl", b"m%d" % i).get(timeout=30).offset for i in range(20)]
    producer.close()
    assert offsets == list(range(20))
    consumer = KafkaConsumer("kp-sasl", group_id="kp-g", auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             **common)
    values = [message.value for _, message in zip(range(20), consumer, strict=False)]
    consumer.close()
    assert values == [b"m%d" % i for i in range(20)]


def test_aiokafka_over_sasl_ssl(secure_gateway):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        common = dict(bootstrap_servers=secure_gateway.sasl_ssl, security_protocol="SASL_SSL",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN, sasl_plain_password=ADMIN_PASSWORD,
                      ssl_context=_ssl_context(secure_gateway))
        producer = AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            offsets = [(await producer.send_and_wait("aio-sasl", b"a%d" % i)).offset for i in range(20)]
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio-sasl", group_id="aio-g", auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            values = []
            while len(values) < 20:
                message = await asyncio.wait_for(consumer.getone(), 30)
                values.append(message.value)
        finally:
            await consumer.stop()
        return offsets, values

    offsets, values = asyncio.run(run())
    assert offsets == list(range(20)) and values == [b"a%d" % i for i in range(20)]


def test_kcat_over_sasl_ssl(secure_gateway, tmp_path):
    security = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-256",
                "-X", f"sasl.username={ADMIN}", "-X", f"sasl.password={ADMIN_PASSWORD}",
                "-X", f"ssl.ca.location={secure_gateway.pki.ca.cert_path}"]
    lines = "".join(f"line {i}\n" for i in range(10))
    done = subprocess.run(["kcat", "-b", secure_gateway.sasl_ssl, *security, "-P", "-t", "kcat-sasl"],
                          input=lines, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["kcat", "-b", secure_gateway.sasl_ssl, *security, "-C", "-t", "kcat-sasl", "-e",
                           "-f", "%o %s\n"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{i} line {i}" for i in range(10)]
    listing = subprocess.run(["kcat", "-b", secure_gateway.sasl_ssl, *security, "-L", "-J"],
                             capture_output=True, text=True, timeout=60)
    brokers = json.loads(listing.stdout)["brokers"]
    assert [f"{b['name']}" for b in brokers] == [secure_gateway.sasl_ssl]  # this listener's address


def test_kafkajs_over_sasl_ssl(secure_gateway):
    env = {**os.environ, "KAFSCALE_SASL_USER": ADMIN, "KAFSCALE_SASL_PASSWORD": ADMIN_PASSWORD,
           "KAFSCALE_CA_FILE": str(secure_gateway.pki.ca.cert_path)}
    done = subprocess.run(["node", "produce.js", secure_gateway.sasl_ssl, "kafkajs-sasl", "none", "50"],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(ack["error"] == 0 for ack in report["acks"])
    assert sorted(int(o["high"]) for o in report["offsets"]) == [25, 25]


@pytest.fixture(scope="module")
def sarama_binary(tmp_path_factory):
    return _build("sarama-e2e", tmp_path_factory.mktemp("gocache"))


def test_sarama_over_sasl_ssl(secure_gateway, sarama_binary):
    env = {**os.environ, "KAFSCALE_SASL_USER": ADMIN, "KAFSCALE_SASL_PASSWORD": ADMIN_PASSWORD,
           "KAFSCALE_CA_FILE": str(secure_gateway.pki.ca.cert_path)}
    topic = f"sarama-sasl-{uuid.uuid4().hex[:6]}"
    done = subprocess.run([str(sarama_binary), secure_gateway.sasl_ssl, topic, "lz4", "30"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["acked"] == list(range(30))
    assert [r["value"] for r in report["records"]] == [f"value {i}" for i in range(30)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_kafscale_client_over_sasl_ssl(secure_gateway, mechanism):
    """The Spark sink's own client (kafscale.kafka_client): SASL over TLS, idempotent and
    transactional produce, read back by librdkafka."""
    from kafscale.kafka_client import Cluster, Security
    from kafscale.kafka_client.producer import Producer as KafscaleProducer

    security = Security("SASL_SSL", mechanism, ADMIN, ADMIN_PASSWORD, ca_file=str(secure_gateway.pki.ca.cert_path))
    topic = f"kc-{mechanism.lower()}"
    with Cluster(secure_gateway.sasl_ssl, security) as cluster:
        producer = KafscaleProducer(cluster)
        for i in range(30):
            producer.send(topic, None, b"v%d" % i, partition=0)
        producer.flush()
        transactional = KafscaleProducer(cluster, transactional_id=f"kc-{mechanism}")
        transactional.send(topic, None, b"t", partition=0)
        transactional.commit()
    config = secure_gateway.sasl_config(mechanism=mechanism)
    assert _consume_all({**config, "isolation.level": "read_committed"}, topic, 31, f"kc-{mechanism}") == \
        [b"v%d" % i for i in range(30)] + [b"t"]


def test_kafscale_client_refuses_a_wrong_password_and_an_untrusted_server(secure_gateway, pki):
    from kafscale.kafka_client import Cluster, Security
    from kafscale.kafka_client.connection import ConnectionLost
    from kafscale.kafka_client.security import SecurityError

    wrong = Security("SASL_SSL", "SCRAM-SHA-256", ADMIN, "not-the-password", ca_file=str(pki.ca.cert_path))
    with pytest.raises(SecurityError, match="authentication failed"), Cluster(secure_gateway.sasl_ssl, wrong) as cluster:
        cluster.refresh()
    untrusting = Security("SSL")  # the system's trust store does not know the test CA
    with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"), \
            Cluster(secure_gateway.ssl, untrusting) as cluster:
        cluster.refresh()
    with pytest.raises(SecurityError, match="needs a username"):
        Security("SASL_SSL", "PLAIN")


def test_kafscale_client_over_mutual_tls_is_held_to_the_principals_acls(secure_gateway, pki):
    from kafscale.kafka_client import Cluster, ClusterError, Security
    from kafscale.kafka_client.producer import Producer as KafscaleProducer
    from kafscale.protocol.errors import ErrorCode

    mutual = Security("SSL", ca_file=str(pki.ca.cert_path), cert_file=str(pki.app.cert), key_file=str(pki.app.key))
    with Cluster(secure_gateway.ssl, mutual) as cluster, pytest.raises(ClusterError) as refused:
        KafscaleProducer(cluster).send("kc-mtls", None, b"x")  # User:app has no ACL at all
    # An idempotent producer's first request, InitProducerId, needs IdempotentWrite (or a topic's
    # Write) as in Kafka: refused by name, nothing produced.
    assert refused.value.code == ErrorCode.cluster_authorization_failed
