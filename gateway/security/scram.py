"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, server side.

Credentials are stored salted (``StoredKey``, ``ServerKey``), never the password.
:class:`ScramExchange` runs one authentication: ``first(client_first)`` gives the
server-first message, ``final(client_final)`` the server-final one or raises
:class:`AuthenticationFailed`. An unknown user gets a made-up salt and fails at the
final step like a wrong password, so names cannot be probed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kafscale.protocol.scram import MECHANISMS, mechanism_code, mechanism_name, salted_password, scram_keys

__all__ = ["MECHANISMS", "ScramCredential", "ScramExchange", "AuthenticationFailed", "salted_password",
           "make_credential", "credential_from_salted", "MIN_ITERATIONS", "MAX_ITERATIONS", "mechanism_code",
           "mechanism_name"]

MIN_ITERATIONS = 4096  # Kafka's bounds for AlterUserScramCredentials
MAX_ITERATIONS = 16384
MAX_CLIENT_FIRST = 4096
_NONCE_BYTES = 16


class AuthenticationFailed(Exception):
    """The client's credentials or messages are wrong; the text is safe to send back."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        encode = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
        return {"salt": encode(self.salt), "iterations": self.iterations,
                "stored_key": encode(self.stored_key), "server_key": encode(self.server_key)}

    @classmethod
    def from_json(cls, mechanism: str, data: dict) -> ScramCredential:
        return cls(mechanism, base64.b64decode(data["salt"]), int(data["iterations"]),
                   base64.b64decode(data["stored_key"]), base64.b64decode(data["server_key"]))

    def matches(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (used by PLAIN)."""
        expected = make_credential(self.mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(expected.stored_key, self.stored_key)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    _, stored_key, server_key = scram_keys(mechanism, salted)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed("malformed SCRAM message")
        pairs.append((part[0], part[2:]))
    return pairs


def _saslname(raw: str) -> str:
    """RFC 5802 5.1: ',' and '=' in names arrive as '=2C' and '=3D'."""
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("malformed SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """One SCRAM authentication, server side. ``lookup(user)`` gives the stored credential."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 decoy_key: bytes, server_nonce: str | None = None) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._decoy_key = decoy_key  # makes an unknown user's salt stable and unguessable
        self._server_nonce = server_nonce or secrets.token_hex(_NONCE_BYTES)
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""
        self.done = False

    def first(self, message: bytes) -> bytes:
        if len(message) > MAX_CLIENT_FIRST:
            # Its nonce is echoed and kept until the exchange ends: real clients send ~60 bytes.
            raise AuthenticationFailed(f"SCRAM client-first message longer than {MAX_CLIENT_FIRST} bytes")
        try:
            text = message.decode()
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from exc
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise AuthenticationFailed("SCRAM channel binding is not supported" if flag.startswith("p")
                                       else "malformed SCRAM client-first message")
        parts = bare.split(",")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r=") or len(parts[1]) < 3:
            raise AuthenticationFailed("malformed SCRAM client-first message")
        if len(parts[0]) == 2:
            raise AuthenticationFailed("empty SCRAM user name")
        self.username = _saslname(parts[0][2:])
        if authzid and _saslname(authzid.removeprefix("a=")) != self.username:
            raise AuthenticationFailed("authorization id differs from the user name")
        # Extensions follow (KIP-86); the only one Kafka defines is for delegation tokens.
        if any(part.split("=", 1)[0] == "tokenauth" for part in parts[2:]):
            raise AuthenticationFailed("delegation tokens are not supported")
        credential = self._lookup(self.username)
        self._known = credential is not None
        if credential is None:
            decoy = hmac.digest(self._decoy_key, self.username.encode() + self.mechanism.encode(), "sha256")
            credential = ScramCredential(self.mechanism, decoy, MIN_ITERATIONS, b"", b"")
        self._credential = credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = parts[1][2:] + self._server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if self._credential is None or self.done:
            raise AuthenticationFailed("SCRAM messages out of order")
        try:
            text = message.decode()
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("SCRAM message is not UTF-8") from exc
        attributes = _attributes(text)
        values = dict(attributes)
        if [key for key, _ in attributes[:2]] != ["c", "r"] or attributes[-1][0] != "p":
            raise AuthenticationFailed("malformed SCRAM client-final message")
        try:
            binding = base64.b64decode(values["c"], validate=True).decode()
            proof = base64.b64decode(values["p"], validate=True)
        except (ValueError, UnicodeDecodeError) as exc:
            raise AuthenticationFailed("malformed SCRAM client-final message") from exc
        if binding != self._gs2_header:
            raise AuthenticationFailed("SCRAM channel binding does not match")
        # Kafka checks the nonce ends with the server-first one: librdkafka before 2.1 sends the
        # client nonce twice (its prefix), and the proof covers the message as sent.
        if not values["r"].endswith(self._nonce):
            raise AuthenticationFailed("SCRAM nonce does not match")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        algorithm = MECHANISMS[self.mechanism][0]
        credential = self._credential
        signature = hmac.digest(credential.stored_key, auth_message, algorithm)
        if len(proof) != len(signature) or not self._known:
            raise AuthenticationFailed(f"authentication failed: invalid credentials with {self.mechanism}")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(algorithm, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(f"authentication failed: invalid credentials with {self.mechanism}")
        self.done = True
        server_signature = hmac.digest(credential.server_key, auth_message, algorithm)
        return b"v=" + base64.b64encode(server_signature)
