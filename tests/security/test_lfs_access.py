"""The LFS endpoint on a gateway with SASL listeners and ACLs: credentials required, principals
authorized as their Kafka requests are, sessions owned by the principal that started them."""

from __future__ import annotations

import ssl
import time

import httpx
import pytest
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourcePatternType, ResourceType

from kafscale.lfs_sdk import LfsClient, LfsError
from tests.security.conftest import ADMIN, ADMIN_PASSWORD, start_secure
from tests.security.test_acls_and_tls import _allow, _create_user


@pytest.fixture(scope="module")
def lfs_topic(secure_gateway):
    admin = AdminClient(secure_gateway.sasl_config())
    admin.create_topics([NewTopic("lfs-docs", 1, config={"kafscale.lfs.enabled": "true"})])["lfs-docs"].result(10)
    _create_user(secure_gateway, "writer", "writer-pw")
    _create_user(secure_gateway, "stranger", "stranger-pw")
    bindings = [_allow("User:writer", ResourceType.TOPIC, "lfs-docs", operation, ResourcePatternType.LITERAL)
                for operation in (AclOperation.WRITE, AclOperation.READ)]
    for future in admin.create_acls(bindings).values():
        future.result(10)
    return f"http://127.0.0.1:{secure_gateway.process.http_port}"


def test_credentials_are_required_and_checked(lfs_topic):
    assert httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3}).status_code == 401
    wrong = httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3}, auth=("writer", "nope"))
    assert wrong.status_code == 401


def test_an_unauthorized_principal_is_refused_and_nothing_is_stored(lfs_topic, secure_gateway):
    refused = httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3},
                         auth=("stranger", "stranger-pw"))
    assert refused.status_code == 403 and "WRITE" in refused.text
    stored = [p for p in secure_gateway.process.data_dir.rglob("*") if "/lfs-docs/lfs/" in str(p) and p.is_file()]
    assert stored == []


def test_a_session_belongs_to_its_principal(lfs_topic):
    session = httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3},
                         auth=("writer", "writer-pw")).json()
    # The super user may write the topic, but the session is not its own.
    foreign = httpx.put(f"{lfs_topic}{session['urls'][0]}", content=b"abc", auth=(ADMIN, ADMIN_PASSWORD))
    assert foreign.status_code == 403 and "another principal" in foreign.text
    assert httpx.put(f"{lfs_topic}{session['urls'][0]}", content=b"abc", auth=("writer", "writer-pw")).status_code == 200


def test_the_sdk_with_credentials_uploads_and_reads_back(lfs_topic):
    with LfsClient(lfs_topic, username="writer", password="writer-pw") as client:
        pointer = client.upload("lfs-docs", b"<idoc>...</idoc>", content_type="application/xml")
        assert client.read(pointer.encode()) == b"<idoc>...</idoc>"
    with LfsClient(lfs_topic, username="stranger", password="stranger-pw") as stranger:
        with pytest.raises(LfsError, match="403"):
            stranger.read(pointer.encode())


@pytest.fixture(scope="module")
def https_gateway(tmp_path_factory, pki):
    """A secure gateway whose HTTP listener is TLS too (http_ssl), client certificates requested."""
    gateway = start_secure(tmp_path_factory.mktemp("https") / "data", pki, "--http-ssl")
    admin = AdminClient(gateway.sasl_config())
    admin.create_topics([NewTopic("lfs-mtls", 1, config={"kafscale.lfs.enabled": "true"})])["lfs-mtls"].result(10)
    for future in admin.create_acls([_allow("User:app", ResourceType.TOPIC, "lfs-mtls", AclOperation.WRITE,
                                            ResourcePatternType.LITERAL)]).values():
        future.result(10)
    yield gateway
    gateway.process.kill()


def test_a_client_certificate_is_a_principal_on_the_tls_listener(https_gateway, pki):
    url = f"https://127.0.0.1:{https_gateway.process.http_port}/lfs/uploads"
    verify = ssl.create_default_context(cafile=str(pki.ca.cert_path))

    def post(issued=None) -> httpx.Response:
        context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
        if issued is not None:
            context.load_cert_chain(str(issued.cert), str(issued.key))
        return httpx.post(url, json={"topic": "lfs-mtls", "size": 3}, verify=context, timeout=10)

    assert post(pki.app).status_code == 201  # CN=app,O=acme → User:app, allowed to WRITE
    stranger = post(pki.stranger)
    assert stranger.status_code == 403 and "CN=stranger" in stranger.text
    assert post().status_code == 401  # no certificate, no credentials
    assert httpx.post(url, json={"topic": "lfs-mtls", "size": 3}, verify=verify, auth=(ADMIN, ADMIN_PASSWORD),
                      timeout=10).status_code == 201


def test_password_guesses_of_one_user_from_one_source_wait_in_turn(lfs_topic, secure_gateway):
    """Issue 38 item 17: each wrong password waited 100 ms on its own, so 200 clients at once
    guessed ~1,300 times a second, each guess a WARNING line. Now one (user, source)'s
    failures wait one after the other, and the log says so once a minute."""
    import concurrent.futures

    log_before = secure_gateway.process.log_path.read_text().count("HTTP authentication failed")

    def guess(i: int) -> int:
        return httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3},
                          auth=("writer", f"guess-{i}"), timeout=60).status_code

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        codes = list(pool.map(guess, range(20)))
    elapsed = time.monotonic() - started
    print(f"20 concurrent wrong passwords of one user took {elapsed:.2f} s")
    assert codes == [401] * 20
    assert elapsed >= 20 * 0.1 * 0.9, f"20 guesses at once took {elapsed:.2f} s: not one at a time"
    # The right password from elsewhere is not held up for long, and works.
    assert httpx.post(f"{lfs_topic}/lfs/uploads", json={"topic": "lfs-docs", "size": 3},
                      auth=("writer", "writer-pw"), timeout=30).status_code == 201
    logged = secure_gateway.process.log_path.read_text().count("HTTP authentication failed") - log_before
    assert logged <= 1
