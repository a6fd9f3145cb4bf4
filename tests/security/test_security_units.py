"""The security logic without a network: SCRAM (RFC 7677's vector and round trips), PLAIN,
ACL decisions and filters as Kafka makes them, certificate-to-principal rules, listeners."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.gateway.config import ConfigError, GatewayConfig
from kafscale.gateway.security.acl import (
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kafscale.gateway.security.plain import parse_plain
from kafscale.gateway.security.scram import AuthenticationFailed, ScramExchange, make_credential
from kafscale.gateway.security.tls import PrincipalMapper, TlsConfigError

DECOY = b"k" * 32


def test_rfc7677_scram_sha_256_vector():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    exchange = ScramExchange("SCRAM-SHA-256", {"user": credential}.get, DECOY,
                             server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = exchange.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    server_final = exchange.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                  b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert exchange.username == "user"


def _client(mechanism: str, user: str, password: str, exchange: ScramExchange, proof_password: str | None = None):
    """A SCRAM client, written from RFC 5802, driving ``exchange``; returns the server-final message."""
    algorithm = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    nonce = base64.b64encode(os.urandom(18)).decode()
    name = user.replace("=", "=3D").replace(",", "=2C")
    bare = f"n={name},r={nonce}"
    server_first = exchange.first(f"n,,{bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(algorithm, (proof_password or password).encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(algorithm, client_key).digest(), auth_message, algorithm)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server_final = exchange.final(f"{without_proof},p={proof}".encode())
    server_key = hmac.digest(salted, b"Server Key", algorithm)
    assert server_final == b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, algorithm))
    return server_final


@settings(max_examples=25, deadline=None)
@given(mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
       user=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
       password=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30))
def test_scram_round_trip_any_user_and_password(mechanism, user, password):
    credential = make_credential(mechanism, password)
    _client(mechanism, user, password, ScramExchange(mechanism, {user: credential}.get, DECOY))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_refuses_a_wrong_password_and_an_unknown_user_alike(mechanism):
    credentials = {"alice": make_credential(mechanism, "right")}
    with pytest.raises(AuthenticationFailed) as wrong:
        _client(mechanism, "alice", "right", ScramExchange(mechanism, credentials.get, DECOY), proof_password="wrong")
    with pytest.raises(AuthenticationFailed) as unknown:
        _client(mechanism, "mallory", "x", ScramExchange(mechanism, credentials.get, DECOY))
    assert str(wrong.value) == str(unknown.value)
    # An unknown user's salt is stable (asking twice tells nothing) and is not the empty salt.
    first = [ScramExchange(mechanism, credentials.get, DECOY).first(b"n,,n=mallory,r=abc").split(b",")[1]
             for _ in range(2)]
    assert first[0] == first[1] and first[0] != b"s="


@pytest.mark.parametrize("message", [
    b"", b"garbage", b"p=tls-unique,,n=a,r=b", b"n,,r=abc", b"n,,n=,r=abc", b"n,,n=a,r=", b"n,a=other,n=a,r=x",
    b"n,,n=a=b,r=x", b"\xff\xfe", b"n,,n=a,r=x,tokenauth=true",
])
def test_scram_malformed_client_first_is_an_authentication_failure(message):
    credentials = {"a": make_credential("SCRAM-SHA-256", "pw")}
    with pytest.raises(AuthenticationFailed):
        ScramExchange("SCRAM-SHA-256", credentials.get, DECOY).first(message)


@pytest.mark.parametrize("final", [b"", b"c=biws", b"r=x,c=biws,p=AAAA", b"c=biws,r=wrong,p=AAAA",
                                   b"c=eSws,r={nonce},p=AAAA", b"c=biws,r={nonce},p=!!!", b"c=biws,r={nonce},p=AAAA"])
def test_scram_malformed_or_forged_client_final_fails(final):
    credentials = {"a": make_credential("SCRAM-SHA-256", "pw")}
    exchange = ScramExchange("SCRAM-SHA-256", credentials.get, DECOY)
    nonce = exchange.first(b"n,,n=a,r=abc").decode().split(",")[0][2:]
    with pytest.raises(AuthenticationFailed):
        exchange.final(final.replace(b"{nonce}", nonce.encode()))
    assert not exchange.done


def test_plain_messages():
    assert parse_plain(b"\0alice\0secret") == ("alice", "secret")
    assert parse_plain(b"alice\0alice\0secret") == ("alice", "secret")
    for bad in (b"", b"alice\0secret", b"bob\0alice\0secret", b"\0\0secret", b"\0alice\0", b"\0a\0b\0c",
                b"\0\xff\0x", b"\0" + b"a" * 2000 + b"\0x"):
        with pytest.raises(AuthenticationFailed):
            parse_plain(bad)


def test_credential_matches_only_its_password():
    credential = make_credential("SCRAM-SHA-512", "secret")
    assert credential.matches("secret") and not credential.matches("Secret")
    assert credential.to_json() != make_credential("SCRAM-SHA-512", "secret").to_json()  # salted per credential


def _acl(rtype, name, pattern, principal, op, permission, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, permission).validate()


T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def test_authorizer_follows_kafkas_rules():
    acls = [
        _acl(T, "orders", LIT, "User:alice", Operation.WRITE, ALLOW),
        _acl(T, "pay-", PRE, "User:bob", Operation.READ, ALLOW),
        _acl(T, "pay-secret", LIT, "User:bob", Operation.ALL, DENY),
        _acl(T, "*", LIT, "User:*", Operation.DESCRIBE, ALLOW, host="10.0.0.1"),
        _acl(G, "app", LIT, "User:bob", Operation.ALL, ALLOW),
        _acl(T, "configs", LIT, "User:carol", Operation.ALTER_CONFIGS, ALLOW),
    ]
    auth = Authorizer(acls, super_users=["User:admin"], allow_if_no_acl=False)
    ok = lambda *a: auth.authorize(*a)  # noqa: E731
    assert ok("User:alice", "1.2.3.4", Operation.WRITE, T, "orders")
    assert ok("User:alice", "1.2.3.4", Operation.DESCRIBE, T, "orders")  # WRITE implies DESCRIBE
    assert not ok("User:alice", "1.2.3.4", Operation.READ, T, "orders")
    assert not ok("User:alice", "1.2.3.4", Operation.DELETE, T, "orders")
    assert ok("User:bob", "1.2.3.4", Operation.READ, T, "pay-eu")  # prefixed
    assert not ok("User:bob", "1.2.3.4", Operation.READ, T, "pay-secret")  # deny wins
    assert not ok("User:bob", "1.2.3.4", Operation.READ, T, "payroll")
    assert ok("User:dave", "10.0.0.1", Operation.DESCRIBE, T, "orders")  # wildcard principal, host, name
    assert not ok("User:dave", "10.0.0.2", Operation.DESCRIBE, T, "orders")
    assert ok("User:bob", "h", Operation.READ, G, "app") and ok("User:bob", "h", Operation.DELETE, G, "app")
    assert ok("User:carol", "h", Operation.DESCRIBE_CONFIGS, T, "configs")  # ALTER_CONFIGS implies it
    assert not ok("User:carol", "h", Operation.DESCRIBE, T, "configs")
    assert not ok("User:anyone", "h", Operation.READ, T, "unnamed")  # no ACL: denied by default
    assert ok("User:admin", "h", Operation.DELETE, C, "kafka-cluster")  # super user
    assert Authorizer(acls, allow_if_no_acl=True).authorize("User:x", "h", Operation.READ, G, "other")
    assert not Authorizer(acls, allow_if_no_acl=True).authorize("User:x", "h", Operation.READ, G, "app")
    assert auth.allowed_any("User:alice", "h", Operation.WRITE, T)
    assert not auth.allowed_any("User:bob", "h", Operation.WRITE, T)


def test_invalid_acls_are_refused_with_a_reason():
    for bad in [
        AclBinding(ResourceType.ANY, "t", LIT, "User:a", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", PatternType.MATCH, "User:a", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", LIT, "alice", "*", Operation.READ, ALLOW),
        AclBinding(T, "t", LIT, "User:a", "*", Operation.ANY, ALLOW),
        AclBinding(T, "t", LIT, "User:a", "*", Operation.READ, Permission.ANY),
        AclBinding(C, "other", LIT, "User:a", "*", Operation.ALTER, ALLOW),
        AclBinding(T, "*", PRE, "User:a", "*", Operation.READ, ALLOW),
        AclBinding(T, "", LIT, "User:a", "*", Operation.READ, ALLOW),
    ]:
        with pytest.raises(InvalidAcl):
            bad.validate()


def test_acl_filters_match_as_kafkas():
    literal = _acl(T, "pay-eu", LIT, "User:a", Operation.READ, ALLOW)
    prefixed = _acl(T, "pay-", PRE, "User:a", Operation.READ, ALLOW)
    wildcard = _acl(T, "*", LIT, "User:b", Operation.WRITE, DENY)
    acls = [literal, prefixed, wildcard]
    pick = lambda f: [acl for acl in acls if f.matches(acl)]  # noqa: E731
    assert pick(AclFilter()) == acls
    assert pick(AclFilter(resource_name="pay-eu")) == [literal]
    assert pick(AclFilter(resource_name="pay-eu", pattern_type=PatternType.MATCH)) == acls
    assert pick(AclFilter(pattern_type=PRE)) == [prefixed]
    assert pick(AclFilter(principal="User:b")) == [wildcard]
    assert pick(AclFilter(permission=DENY, operation=Operation.WRITE)) == [wildcard]
    assert pick(AclFilter(resource_type=G)) == []
    assert AclBinding.from_json(literal.to_json()) == literal


def test_principal_mapping_rules():
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/L,DEFAULT")
    assert mapper.name("CN=svc,OU=ServiceUsers,O=acme") == "svc"
    assert mapper.name("CN=Bob,OU=Ops,O=acme") == "bob@ops"
    assert mapper.name("CN=x,O=acme") == "CN=x,O=acme"  # DEFAULT: the whole name
    assert PrincipalMapper(r"RULE:^CN=([^,]*).*$/$1/U").name("O=none") is None  # no rule: refused
    for bad in ("RULE:(/x/", "NONSENSE", "RULE:a/b"):
        with pytest.raises(TlsConfigError):
            PrincipalMapper(bad)


def test_listener_configuration():
    config = GatewayConfig.of(listeners="PLAINTEXT://127.0.0.1:9092,INTERNAL://0.0.0.0:9093",
                           listener_security_protocol_map="INTERNAL:SASL_SSL", ssl_certfile="c.pem",
                           advertised_listeners="INTERNAL://kafka.internal:9093").validate()
    assert [(l.name, l.protocol, l.tls, l.sasl) for l in config.network.kafka_listeners] == [
        ("PLAINTEXT", "PLAINTEXT", False, False), ("INTERNAL", "SASL_SSL", True, True)]
    assert config.network.advertised_endpoints == {"INTERNAL": ("kafka.internal", 9093)}
    for bad in [dict(listeners="SSL://127.0.0.1:9093"),  # no certificate
                dict(listeners="FOO://127.0.0.1:1"), dict(listeners="PLAINTEXT://nohost"),
                dict(listeners="PLAINTEXT://a:1,PLAINTEXT://b:2"), dict(listeners="PLAINTEXT://a:1,SSL://a:1",
                                                                        ssl_certfile="c"),
                dict(advertised_listeners="OTHER://x:1"), dict(ssl_client_auth="required"),
                dict(sasl_enabled_mechanisms="GSSAPI"), dict(sasl_bootstrap_user="admin"),
                dict(super_users="admin"), dict(listener_security_protocol_map="X:NOPE")]:
        with pytest.raises(ConfigError):
            GatewayConfig.of(**bad).validate()


def test_secrets_never_in_the_config_repr():
    config = GatewayConfig.of(sasl_bootstrap_user="admin", sasl_bootstrap_password="hunter2",
                           ssl_key_password="keypass", s3_secret_access_key="s3secret").validate()
    assert "hunter2" not in repr(config) and "keypass" not in repr(config) and "s3secret" not in repr(config)
