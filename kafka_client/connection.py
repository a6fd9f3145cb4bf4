"""One blocking connection to one broker: frames out, answers in, in order."""

from __future__ import annotations

import itertools
import socket
from typing import Any

from kafscale.protocol import FrameDecoder, encode_frame
from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.messages import RequestHeader, decode_response, encode_request, request_class

from .security import ScramClient, Security, SecurityError, plain_message

__all__ = ["BrokerConnection", "ConnectionLost"]

_RECEIVE_BYTES = 1 << 16


class ConnectionLost(OSError):
    """The broker closed the connection, or did not answer in time."""


class BrokerConnection:
    def __init__(self, host: str, port: int, security: Security, *, timeout_s: float = 30.0,
                 client_id: str = "kafscale-client") -> None:
        self.address = f"{host}:{port}"
        self._client_id = client_id
        self._correlation = itertools.count(1)
        self._decoder = FrameDecoder()
        self._socket = socket.create_connection((host, port), timeout=timeout_s)
        try:
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if security.tls:
                self._socket = security.ssl_context().wrap_socket(self._socket, server_hostname=host)
            if security.sasl:
                self._authenticate(security)
        except BaseException:
            self._socket.close()
            raise

    def call(self, api_key: ApiKey, version: int, values: dict[str, Any]) -> Any:
        """Send one request (Kafka's field names, built for ``version``) and return the answer."""
        body = build(request_class(api_key, version), values)
        correlation_id = next(self._correlation)
        frame = encode_request(RequestHeader(api_key, version, correlation_id, self._client_id), body)
        try:
            self._socket.sendall(encode_frame(frame))
            payload = self._next_frame()
        except (TimeoutError, OSError) as exc:
            self.close()
            raise ConnectionLost(f"{self.address}: {exc}") from exc
        answered, response = decode_response(api_key, version, payload)
        if answered != correlation_id:
            self.close()
            raise ConnectionLost(f"{self.address} answered request {answered}, expected {correlation_id}")
        return response

    def _next_frame(self) -> bytearray:
        while (frame := self._decoder.next_frame()) is None:
            data = self._socket.recv(_RECEIVE_BYTES)
            if not data:
                raise ConnectionLost(f"{self.address} closed the connection")
            self._decoder.feed(data)
        return frame

    def _authenticate(self, security: Security) -> None:
        assert security.mechanism and security.username is not None and security.password is not None
        shake = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
        if shake.error_code != ErrorCode.none:
            raise SecurityError(f"{self.address} does not offer SASL {security.mechanism} "
                                f"(it offers {', '.join(shake.mechanisms)})")
        if security.mechanism == "PLAIN":
            self._exchange(plain_message(security.username, security.password))
            return
        scram = ScramClient(security.mechanism, security.username, security.password)
        challenge = self._exchange(scram.first())
        scram.check(self._exchange(scram.final(challenge)))

    def _exchange(self, message: bytes) -> bytes:
        answer = self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": message})
        if answer.error_code != ErrorCode.none:
            raise SecurityError(f"{self.address}: authentication failed: {answer.error_message}")
        return answer.auth_bytes

    def close(self) -> None:
        try:
            self._socket.close()
        except OSError:
            pass
