"""A gateway with every kind of listener, the ACL authorizer, a bootstrap admin, and
certificates made for the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit.certs import CertificateAuthority, Issued
from devkit.ports import free_port
from tests.support.gateway_process import GatewayProcess

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"


@dataclass
class Pki:
    ca: CertificateAuthority
    server: Issued
    app: Issued  # CN=app,O=acme: mapped to User:app by the gateway's rules
    stranger: Issued  # same CA, no ACLs
    expired: Issued
    foreign: Issued  # signed by a CA the gateway does not trust
    foreign_ca: CertificateAuthority


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(directory / "ca")
    foreign_ca = CertificateAuthority(directory / "foreign", "foreign CA")
    return Pki(ca, ca.issue("server", "localhost", server=True), ca.issue("app", "app", organization="acme"),
               ca.issue("stranger", "stranger", organization="elsewhere"),
               ca.issue("expired", "app", organization="acme", expired=True), foreign_ca.issue("foreign", "app"),
               foreign_ca)


@dataclass
class SecureGateway:
    process: GatewayProcess
    sasl_ssl: str
    sasl_plaintext: str
    ssl: str
    pki: Pki

    @property
    def plaintext(self) -> str:
        return self.process.bootstrap

    def sasl_config(self, user: str = ADMIN, password: str = ADMIN_PASSWORD, mechanism: str = "SCRAM-SHA-512") -> dict:
        """librdkafka settings for the SASL_SSL listener."""
        return {"bootstrap.servers": self.sasl_ssl, "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password, "ssl.ca.location": str(self.pki.ca.cert_path)}

    def tls_config(self, client: Issued) -> dict:
        return {"bootstrap.servers": self.ssl, "security.protocol": "SSL", "ssl.ca.location": str(self.pki.ca.cert_path),
                "ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)}


def start_secure(data: Path, pki: Pki, *extra: str) -> SecureGateway:
    plain, sasl_ssl, sasl_plain, ssl = (free_port() for _ in range(4))
    process = GatewayProcess(
        data, "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_ssl},"
                             f"SASL_PLAINTEXT://127.0.0.1:{sasl_plain},SSL://127.0.0.1:{ssl}",
        "--ssl-certfile", str(pki.server.cert), "--ssl-keyfile", str(pki.server.key),
        "--ssl-cafile", str(pki.ca.cert_path), "--ssl-client-auth", "requested",
        "--ssl-principal-mapping-rules", r"RULE:^CN=([^,]+),O=acme$/$1/,DEFAULT",
        "--authorizer", "acl", "--super-users", f"User:{ADMIN}",
        "--sasl-bootstrap-user", ADMIN, "--sasl-bootstrap-password", ADMIN_PASSWORD,
        "--group-initial-rebalance-delay-ms", "500", *extra, port=plain,
    ).start()
    return SecureGateway(process, f"127.0.0.1:{sasl_ssl}", f"127.0.0.1:{sasl_plain}", f"127.0.0.1:{ssl}", pki)


@pytest.fixture(scope="module")
def secure_gateway(tmp_path_factory, pki):
    gateway = start_secure(tmp_path_factory.mktemp("secure") / "data", pki)
    yield gateway
    gateway.process.kill()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/security/" in str(item.fspath) and "units" not in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
