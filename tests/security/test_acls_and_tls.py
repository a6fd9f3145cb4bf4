"""ACLs as clients see them (their own authorization errors), users managed through the admin
APIs, mTLS principals, and what an attacker gets: a closed connection and a slower guess."""

from __future__ import annotations

import socket
import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
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

from tests.security.conftest import ADMIN, ADMIN_PASSWORD


def _admin(gateway) -> AdminClient:
    return AdminClient(gateway.sasl_config())


def _allow(principal, rtype, name, operation, pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW):
    return AclBinding(rtype, name, pattern, principal, "*", operation, permission)


def _create_user(gateway, user: str, password: str) -> None:
    admin = _admin(gateway)
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)


@pytest.fixture(scope="module")
def alice(secure_gateway):
    """User alice may write and read alice-* topics, use group alice-group, create topic alice-new."""
    _create_user(secure_gateway, "alice", "alice-pw")
    admin = _admin(secure_gateway)
    for topic in ("alice-data", "forbidden"):
        admin.create_topics([NewTopic(topic, 1)])[topic].result(10)
    bindings = [
        _allow("User:alice", ResourceType.TOPIC, "alice-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        _allow("User:alice", ResourceType.TOPIC, "alice-", AclOperation.READ, ResourcePatternType.PREFIXED),
        _allow("User:alice", ResourceType.GROUP, "alice-group", AclOperation.READ),
        _allow("User:alice", ResourceType.TOPIC, "alice-new", AclOperation.CREATE),
        _allow("User:alice", ResourceType.TOPIC, "alice-data", AclOperation.DELETE, permission=AclPermissionType.DENY),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(10)
    return secure_gateway.sasl_config("alice", "alice-pw")


def test_users_are_managed_through_the_admin_api(secure_gateway, alice):
    admin = _admin(secure_gateway)  # kept: futures fail once their client is collected
    described = admin.describe_user_scram_credentials(["alice", ADMIN])
    alice_info = described["alice"].result(10)
    assert [(i.mechanism, i.iterations) for i in alice_info.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    assert {i.mechanism for i in described[ADMIN].result(10).scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512}
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_produce_allowed_and_denied(alice):
    producer = Producer({**alice, "enable.idempotence": True})
    results = {}
    for topic in ("alice-data", "forbidden"):
        producer.produce(topic, b"x", on_delivery=lambda err, msg: results.setdefault(msg.topic(), err))
    producer.flush(20)
    assert results["alice-data"] is None
    assert results["forbidden"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_consume_with_group_allowed_and_group_denied(alice):
    consumer = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["alice-data"])
    message, deadline = None, time.monotonic() + 30
    while message is None and time.monotonic() < deadline:
        polled = consumer.poll(0.5)
        if polled is not None and not polled.error():
            message = polled
    assert message is not None and message.value() == b"x"
    consumer.commit(message, asynchronous=False)
    assert consumer.committed([TopicPartition("alice-data", 0)], 10)[0].offset == message.offset() + 1
    consumer.close()

    other = Consumer({**alice, "group.id": "someone-elses", "auto.offset.reset": "earliest"})
    other.subscribe(["alice-data"])
    error, deadline = None, time.monotonic() + 20
    while error is None and time.monotonic() < deadline:
        polled = other.poll(0.5)
        if polled is not None and polled.error():
            error = polled.error()
    other.close()
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_topic_create_and_delete_allowed_and_denied(alice):
    admin = AdminClient(alice)
    admin.create_topics([NewTopic("alice-new", 1)])["alice-new"].result(10)
    with pytest.raises(KafkaException) as denied:
        admin.create_topics([NewTopic("bob-new", 1)])["bob-new"].result(10)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as denied:
        admin.delete_topics(["alice-data"])["alice-data"].result(10)  # an explicit DENY wins
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_metadata_shows_only_what_the_principal_may_describe(alice, secure_gateway):
    seen = set(AdminClient(alice).list_topics(timeout=10).topics)
    assert {"alice-data", "alice-new"} <= seen and "forbidden" not in seen
    assert "forbidden" in _admin(secure_gateway).list_topics(timeout=10).topics  # the super user sees all


def test_acl_admin_needs_cluster_rights_and_round_trips(alice, secure_gateway):
    # librdkafka drops DescribeAcls' top-level error (returns []), so the denial is seen with kafka-python.
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    alice_admin = KafkaAdminClient(bootstrap_servers=secure_gateway.sasl_ssl, security_protocol="SASL_SSL",
                                   sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                   sasl_plain_password="alice-pw",
                                   ssl_context=ssl.create_default_context(cafile=str(secure_gateway.pki.ca.cert_path)))
    with pytest.raises(ClusterAuthorizationFailedError):
        alice_admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                            ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY)))
    alice_admin.close()
    admin = _admin(secure_gateway)
    mine = AclBindingFilter(ResourceType.TOPIC, "alice-", ResourcePatternType.PREFIXED, "User:alice", None,
                            AclOperation.ANY, AclPermissionType.ANY)
    assert {b.operation for b in admin.describe_acls(mine).result(10)} == {AclOperation.READ, AclOperation.WRITE}
    temporary = _allow("User:temp", ResourceType.GROUP, "temp", AclOperation.READ)
    admin.create_acls([temporary])[temporary].result(10)
    gone = AclBindingFilter(ResourceType.GROUP, "temp", ResourcePatternType.LITERAL, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)
    assert admin.delete_acls([gone])[gone].result(10) == [temporary]
    assert admin.describe_acls(gone).result(10) == []


def test_kafka_python_admin_manages_acls(secure_gateway):
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient, ResourcePattern
    from kafka.admin import ResourceType as KResourceType

    admin = KafkaAdminClient(bootstrap_servers=secure_gateway.sasl_ssl, security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ADMIN,
                             sasl_plain_password=ADMIN_PASSWORD,
                             ssl_context=ssl.create_default_context(cafile=str(secure_gateway.pki.ca.cert_path)))
    acl = ACL("User:kp", "*", ACLOperation.READ, ACLPermissionType.ALLOW, ResourcePattern(KResourceType.TOPIC, "kp-t"))
    created = admin.create_acls([acl])
    assert created["failed"] == [] and len(created["succeeded"]) == 1
    found, error = admin.describe_acls(ACLFilter("User:kp", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                 ResourcePattern(KResourceType.TOPIC, "kp-t")))
    assert [(a.principal, a.operation) for a in found] == [("User:kp", ACLOperation.READ)]
    admin.close()


def test_mtls_principal_from_the_certificate(secure_gateway, pki):
    admin = _admin(secure_gateway)
    admin.create_topics([NewTopic("mtls-topic", 1)])["mtls-topic"].result(10)
    binding = _allow("User:app", ResourceType.TOPIC, "mtls-topic", AclOperation.WRITE)  # CN=app,O=acme -> app
    admin.create_acls([binding])[binding].result(10)
    for client, expected in ((pki.app, None), (pki.stranger, KafkaError.TOPIC_AUTHORIZATION_FAILED)):
        producer = Producer(secure_gateway.tls_config(client))
        outcome = []
        producer.produce("mtls-topic", b"m", on_delivery=lambda err, msg, into=outcome: into.append(err))
        producer.flush(20)
        assert len(outcome) == 1
        assert (outcome[0] and outcome[0].code()) == expected


@pytest.mark.parametrize("certificate", ["expired", "foreign"])
def test_expired_or_untrusted_client_certificates_are_refused(secure_gateway, pki, certificate):
    before = secure_gateway.process.metric('kafscale_authentications_total{mechanism="TLS",result="failure"}')
    context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    issued = getattr(pki, certificate)
    context.load_cert_chain(str(issued.cert), str(issued.key))
    host, port = secure_gateway.ssl.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\x00\x00\x00\x01x")
                assert tls.recv(1) == b""  # TLS 1.3 reports the refusal at the first read
                raise ConnectionError("closed")
    time.sleep(0.2)
    assert secure_gateway.process.metric('kafscale_authentications_total{mechanism="TLS",result="failure"}') > before


def test_wrong_passwords_are_refused_slowly_and_counted(secure_gateway):
    before = secure_gateway.process.metric('kafscale_authentications_total{mechanism="SCRAM-SHA-512",result="failure"}')
    producer = Producer({**secure_gateway.sasl_config(ADMIN, "not-the-password"), "message.timeout.ms": 3000})
    errors = []
    producer.produce("t", b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    after = secure_gateway.process.metric('kafscale_authentications_total{mechanism="SCRAM-SHA-512",result="failure"}')
    # librdkafka retries with backoff; each attempt costs it the 100 ms delay.
    assert 1 <= after - before <= 30
    assert "not-the-password" not in secure_gateway.process.logs()


def _raw(address: str, payload: bytes) -> bytes:
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


def _frame(api_key: int, version: int, body: bytes, client: bytes = b"t") -> bytes:
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + (7).to_bytes(4, "big")
    header += len(client).to_bytes(2, "big") + client
    return (len(header) + len(body)).to_bytes(4, "big") + header + body


def test_requests_before_authentication_close_the_connection(secure_gateway):
    metadata_v1_all_topics = (-1).to_bytes(4, "big", signed=True)
    assert _raw(secure_gateway.sasl_plaintext, _frame(3, 1, metadata_v1_all_topics)) == b""
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM (33) with the list, then the connection closes.
    answer = _raw(secure_gateway.sasl_plaintext, _frame(17, 1, (6).to_bytes(2, "big") + b"GSSAPI"))
    assert answer[8:10] == (33).to_bytes(2, "big") and b"SCRAM-SHA-256" in answer
    # PLAIN with a wrong password after a v0 handshake: the raw token is refused by closing.
    handshake = _frame(17, 0, (5).to_bytes(2, "big") + b"PLAIN")
    token = b"\0admin\0wrong"
    answer = _raw(secure_gateway.sasl_plaintext, handshake + len(token).to_bytes(4, "big") + token)
    assert answer[8:10] == b"\0\0" and len(answer) == 4 + int.from_bytes(answer[:4], "big")  # handshake only


def test_raw_v0_plain_authenticates_then_serves(secure_gateway):
    handshake = _frame(17, 0, (5).to_bytes(2, "big") + b"PLAIN")
    token = f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode()
    api_versions = _frame(18, 0, b"")
    host, port = secure_gateway.sasl_plaintext.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(handshake + len(token).to_bytes(4, "big") + token + api_versions)
        data, deadline = b"", time.monotonic() + 10
        while time.monotonic() < deadline:
            data += sock.recv(65536)
            sizes, position = [], 0
            while position + 4 <= len(data):
                size = int.from_bytes(data[position:position + 4], "big")
                if position + 4 + size > len(data):
                    break
                sizes.append(size)
                position += 4 + size
            if len(sizes) == 3:
                break
    assert sizes[1] == 0  # PLAIN's empty server token: authenticated
    assert len(sizes) == 3 and sizes[2] > 100  # then ApiVersions is answered


def test_garbage_instead_of_a_tls_handshake_is_closed_and_the_gateway_lives_on(secure_gateway):
    for listener in (secure_gateway.ssl, secure_gateway.sasl_ssl):
        reply = _raw(listener, b"\x16\x03\x01\x00\x05garbage" + uuid.uuid4().bytes * 100)
        assert reply[:1] == b"\x15" and len(reply) == 7  # one TLS alert record, then the close
    producer = Producer(secure_gateway.sasl_config())
    producer.produce("after-garbage", b"ok")
    assert producer.flush(20) == 0


def test_authorized_operations_are_reported_per_principal(alice, secure_gateway):
    """Metadata v8+, DescribeCluster and DescribeGroups report what the principal may do, as
    Kafka computes it: alice's prefixed READ/WRITE and denied DELETE on alice-data, nothing
    on the cluster (she may not describe it); everything for the super user."""
    from confluent_kafka import TopicCollection

    as_alice, as_admin = AdminClient(alice), _admin(secure_gateway)
    topic = as_alice.describe_topics(TopicCollection(["alice-data"]), include_authorized_operations=True)
    described = topic["alice-data"].result(10)
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
    admin_view = as_admin.describe_topics(TopicCollection(["alice-data"]), include_authorized_operations=True)
    assert AclOperation.DELETE in admin_view["alice-data"].result(10).authorized_operations

    assert not as_alice.describe_cluster(include_authorized_operations=True).result(10).authorized_operations
    cluster = as_admin.describe_cluster(include_authorized_operations=True).result(10)
    assert {AclOperation.DESCRIBE, AclOperation.ALTER, AclOperation.CREATE} <= set(cluster.authorized_operations)

    group = as_alice.describe_consumer_groups(["alice-group"], include_authorized_operations=True)
    assert set(group["alice-group"].result(10).authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_an_authorization_check_without_a_client_session_refuses():
    """Issue 21: authorization decides for the session it is given; asked with none (work
    that is not a client request) it refuses instead of allowing, as it did with an ambient
    session that was unset."""
    from kafscale.gateway.config import GatewayConfig, Listener
    from kafscale.gateway.metrics import Metrics
    from kafscale.gateway.security.access import Access, ClientAccess
    from kafscale.gateway.security.acl import Operation, ResourceType
    from kafscale.gateway.security.session import Session
    from kafscale.gateway.security.store import SecurityStore

    store = SecurityStore()
    access = Access(GatewayConfig.of(authorizer="acl", allow_everyone_if_no_acl_found=True), store, Metrics())
    assert not access.allowed(None, Operation.READ, ResourceType.TOPIC, "t")
    assert not access.allowed_any(None, Operation.WRITE, ResourceType.TOPIC)
    client = ClientAccess(access, Session.start(Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0), "127.0.0.1"))
    assert client.allowed_topic(Operation.READ, "t")  # no ACL names it, and everyone is allowed then


def test_transactional_ids_need_write_on_the_id(secure_gateway, alice):
    """Kafka's rules: a transactional producer needs WRITE on its TransactionalId (DESCRIBE to
    find its coordinator), WRITE on the topics it adds; without them, its transactional id
    is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    admin = _admin(secure_gateway)
    for future in admin.create_acls([
            _allow("User:alice", ResourceType.TRANSACTIONAL_ID, "alice-tx", AclOperation.WRITE)]).values():
        future.result(10)
    producer = Producer({**alice, "transactional.id": "alice-tx"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("alice-data", value=b"in a transaction")
    producer.commit_transaction(15)
    denied = Producer({**alice, "transactional.id": "someone-elses-tx"})
    with pytest.raises(KafkaException) as refused:
        denied.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    producer.begin_transaction()
    delivered = []
    try:
        producer.produce("forbidden", value=b"not alice's topic", on_delivery=lambda err, _: delivered.append(err))
    except KafkaException as exc:
        # librdkafka refuses at once when the topic's metadata answer (TOPIC_AUTHORIZATION_FAILED)
        # reached it before the call, which depends on its background metadata timing.
        assert exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        return
    with pytest.raises(KafkaException):
        producer.commit_transaction(15)  # a partition could not be added: the transaction cannot commit
    assert [err.code() for err in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
