"""SCRAM's key derivation (RFC 5802, RFC 7677) and Kafka's mechanism codes: one definition
for the gateway's authenticator, the client's login and the admin command's new users."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["MECHANISMS", "mechanism_code", "mechanism_name", "salted_password", "scram_keys"]

# Mechanism → (hash, Kafka's ScramMechanism code in Describe/AlterUserScramCredentials).
MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}


def mechanism_code(name: str) -> int:
    return MECHANISMS[name][1]


def mechanism_name(code: int) -> str | None:
    return next((name for name, (_, c) in MECHANISMS.items() if c == code), None)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i). RFC 5802 asks for SASLprep; Kafka's clients and broker use the
    UTF-8 bytes as they are."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode(), salt, iterations)


def scram_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a salted password."""
    algorithm = MECHANISMS[mechanism][0]
    client_key = hmac.digest(salted, b"Client Key", algorithm)
    return client_key, hashlib.new(algorithm, client_key).digest(), hmac.digest(salted, b"Server Key", algorithm)
