"""How a client connects: plaintext or TLS, optionally SASL PLAIN or SCRAM (Kafka's
``security.protocol`` and ``sasl.mechanism``), and the client side of the SASL exchanges."""

from __future__ import annotations

import base64
import hmac
import os
import re
import ssl
from dataclasses import dataclass

from kafscale.protocol.scram import MECHANISMS as SCRAM_MECHANISMS
from kafscale.protocol.scram import salted_password, scram_keys

__all__ = ["Security", "SecurityError", "plain_message", "ScramClient"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SecurityError(ValueError):
    """A security setting is unknown or incomplete, or authentication failed."""


@dataclass(frozen=True)
class Security:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # PEM; None: the system's trust store
    cert_file: str | None = None  # PEM client certificate (mutual TLS)
    key_file: str | None = None
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise SecurityError(f"security protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.sasl:
            if self.mechanism not in MECHANISMS:
                raise SecurityError(f"SASL mechanism {self.mechanism!r} is not one of {', '.join(MECHANISMS)}")
            if self.username is None or self.password is None:
                raise SecurityError(f"{self.protocol} needs a username and password")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.check_hostname
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def credentials_from_jaas(jaas: str) -> tuple[str, str]:
    """Username and password of a JAAS line as Kafka clients are configured
    (``...PlainLoginModule required username="u" password="p";``)."""
    fields = {name: value.replace('\\"', '"') for name, value in _JAAS_FIELD.findall(jaas)}
    if "username" not in fields or "password" not in fields:
        raise SecurityError("sasl.jaas.config has no username=\"...\" password=\"...\"")
    return fields["username"], fields["password"]


def plain_message(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


class ScramClient:
    """The client's two messages of RFC 5802 (no channel binding), and the check of the
    server's final message (a server that does not know the password cannot pass it)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self._mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism][0]
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = base64.b64encode(os.urandom(18)).decode()
        self._first_bare = f"n={name},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(part.split("=", 1) for part in text.split(","))
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), int(fields.get("i", "0"))
        if not nonce.startswith(self._nonce) or salt is None or iterations < 1:
            raise SecurityError("the server's SCRAM challenge is not valid")
        salted = salted_password(self._mechanism, self._password, base64.b64decode(salt), iterations)
        client_key, stored_key, server_key = scram_keys(self._mechanism, salted)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        fields = dict(part.split("=", 1) for part in server_final.decode().split(",") if "=" in part)
        if "e" in fields:
            raise SecurityError(f"SCRAM authentication failed: {fields['e']}")
        if not hmac.compare_digest(base64.b64decode(fields.get("v", "")), self._server_signature):
            raise SecurityError("the server's SCRAM signature does not match: not the server we trust")
