"""TLS for the Kafka and HTTP listeners: one server context, reloaded when its files change,
and the principal a client certificate stands for (Kafka's ssl.principal.mapping.rules).

A principal from a certificate is ``User:`` + the mapped subject; the default rule keeps
the whole distinguished name as RFC 4514 writes it, e.g. ``User:CN=app,OU=ops,O=acme``.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import time
from dataclasses import dataclass

import trio
from cryptography import x509

from .tls_stream import TlsStream

__all__ = ["TlsContext", "PrincipalMapper", "TlsConfigError", "TlsHandshakeFailed", "tls_accept"]

log = logging.getLogger("kafscale.security")

_CHECK_EVERY_S = 1.0  # files are looked at no more often than this, at new connections


class TlsConfigError(ValueError):
    """A certificate, key or CA file that cannot be used; the message says which and why."""


class TlsContext:
    """The server-side SSLContext, rebuilt when the certificate, key or CA file changes
    (a failed reload keeps the previous context and logs why)."""

    def __init__(self, certfile: str, keyfile: str = "", key_password: str = "", cafile: str = "",
                 client_auth: str = "none") -> None:
        self._certfile, self._keyfile, self._cafile = certfile, keyfile, cafile
        self._password = key_password or None
        self._client_auth = client_auth
        self._stamp = self._files_stamp()
        self._checked = time.monotonic()
        self._context = self._build()  # raises TlsConfigError at start
        self.reloads = 0

    def _files(self) -> list[str]:
        return [path for path in (self._certfile, self._keyfile, self._cafile) if path]

    def _files_stamp(self) -> tuple:
        stamp: list[tuple[str, int | None, int | None, int | None]] = []
        for path in self._files():
            try:
                info = os.stat(path)
                stamp.append((path, info.st_mtime_ns, info.st_size, info.st_ino))
            except OSError:
                stamp.append((path, None, None, None))
        return tuple(stamp)

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_RENEGOTIATION  # TLS 1.2 renegotiation: a DoS lever, needed by no client
        try:
            context.load_cert_chain(self._certfile, self._keyfile or None, self._password)
            if self._cafile:
                context.load_verify_locations(cafile=self._cafile)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise TlsConfigError(f"cannot load TLS files {', '.join(self._files())}: {exc}") from exc
        context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                               "required": ssl.CERT_REQUIRED}[self._client_auth]
        return context

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= _CHECK_EVERY_S:
            self._checked = now
            stamp = self._files_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._build()
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self._certfile)
                except TlsConfigError as exc:
                    log.error("%s; still serving the previous certificate", exc)
        return self._context


class TlsHandshakeFailed(Exception):
    """A client's TLS handshake failed or timed out (the connection is closed); the text says why."""


async def tls_accept(stream: trio.abc.Stream, tls: TlsContext, timeout_s: float) -> TlsStream:
    """The server side of a new connection's TLS handshake, done within ``timeout_s``."""
    secured = TlsStream(stream, tls.context())
    reason = f"no TLS handshake within {timeout_s * 1000:.0f} ms"
    with trio.move_on_after(timeout_s):
        try:
            await secured.do_handshake()
            return secured
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError) as exc:
            reason = str(exc.__cause__ or exc) or type(exc).__name__
    await trio.aclose_forcefully(secured)
    raise TlsHandshakeFailed(reason)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


_RULE = re.compile(r"\s*RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)\s*(?:,|$)")
_DEFAULT = re.compile(r"\s*DEFAULT\s*(?:,|$)")
_GROUP_REFERENCE = re.compile(r"\$(\d+)")


class PrincipalMapper:
    """Kafka's ssl.principal.mapping.rules: the first rule whose pattern matches the whole
    DN gives the name (Java's ``$1`` group references; L/U lower or upper case it)."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        position = 0
        while position < len(rules.strip()):
            found = _DEFAULT.match(rules, position)
            if found:
                self.rules.append(_Rule(None))
            else:
                found = _RULE.match(rules, position)
                if not found:
                    raise TlsConfigError(f"ssl_principal_mapping_rules: cannot parse {rules[position:]!r}")
                try:
                    pattern = re.compile(found.group(1).replace("\\/", "/"))
                except re.error as exc:
                    raise TlsConfigError(f"ssl_principal_mapping_rules: bad pattern {found.group(1)!r}: {exc}") from exc
                replacement = _GROUP_REFERENCE.sub(r"\\g<\1>", found.group(2).replace("\\/", "/"))
                self.rules.append(_Rule(pattern, replacement, found.group(3)))
            position = found.end()

    def name(self, distinguished_name: str) -> str | None:
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            if rule.pattern.fullmatch(distinguished_name):
                name = rule.pattern.sub(rule.replacement, distinguished_name, count=1)
                return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
        return None

    def principal(self, certificate_der: bytes) -> str | None:
        """``User:<name>`` for a client certificate, None when no rule matches its subject."""
        subject = x509.load_der_x509_certificate(certificate_der).subject.rfc4514_string()
        name = self.name(subject)
        return None if name is None else f"User:{name}"
