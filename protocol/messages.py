"""Request decoding and response encoding over kio's generated message classes.

Only this module (and the tests) touch kio's serialisation API, so the rest of
Kafscale sees plain frozen dataclasses: ``decode_request(frame)`` gives a
:class:`Request`, ``encode_response(header, body)`` gives the frame payload, and
``encode_response_pieces`` the payload as buffers to send (Fetch answers, encoded by
hand in :mod:`.fetch_response`, keep their stored batches where they are).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from .api_versions import ApiKey, version_range
from .entities import build
from .errors import MalformedFrame, UnsupportedVersion
from .fetch_response import FetchAnswer, encode_fetch_response
from .guard import check_lengths
from .legacy import legacy, target_version
from .produce_request import decode_produce_body
from .produce_response import ProduceAnswer, encode_produce_response
from .response_fields import Buffer
from .topic_partitions_request import decode_topic_partitions_body

__all__ = [
    "RequestHeader",
    "Request",
    "peek_header",
    "decode_request",
    "encode_response",
    "encode_response_pieces",
    "encode_request",
    "decode_response",
    "request_class",
    "response_class",
]

_HEADER_PREFIX = struct.Struct(">hhi")
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # a kio request payload dataclass


@cache
def request_class(api_key: int, api_version: int) -> Any:
    """kio's request class for a version (for a legacy version, its target's: see legacy.py)."""
    return load_request_schema(api_key, target_version(api_key, api_version))


@cache
def response_class(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, target_version(api_key, api_version))


@cache
def _reader(entity_type: Any) -> Callable[[Any, int], tuple[Any, int]]:
    return entity_reader(entity_type)


@cache
def _writer(entity_type: Any) -> Callable[[Any, Any], None]:
    return entity_writer(entity_type)


def peek_header(frame: bytes) -> RequestHeader:
    """The fixed part of any request header (key, version, correlation id)."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedFrame(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return RequestHeader(api_key, api_version, correlation_id)


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise MalformedFrame("tagged field runs past the end of the request")
    return pos


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise MalformedFrame("truncated varint in request header")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedFrame("varint too long in request header")


def decode_request(frame: bytes | bytearray, *, strict: bool = False) -> Request:
    """Decode one request frame (without its size prefix). A Produce request's record sets
    are memoryviews of ``frame`` (writable when it is a bytearray).

    :raises MalformedFrame: the header or body cannot be decoded (or, with
        ``strict``, bytes follow the body).
    :raises UnsupportedVersion: the API key or version is outside the served table
        (``peek_header`` still gives the correlation id to answer with).
    """
    prefix = peek_header(frame)
    served = version_range(prefix.api_key)
    if served is None or prefix.api_version not in served:
        raise UnsupportedVersion(prefix.api_key, prefix.api_version)
    body_type = request_class(prefix.api_key, prefix.api_version)
    pos = _HEADER_PREFIX.size
    if len(frame) < pos + 2:
        raise MalformedFrame("request header is missing its client id")
    (client_id_len,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(frame):
            raise MalformedFrame("client id runs past the end of the request")
        try:
            client_id = frame[pos:end].decode()
        except UnicodeDecodeError as exc:
            raise MalformedFrame("client id is not valid UTF-8") from exc
        pos = end
    if body_type.__flexible__:
        pos = _skip_tagged_fields(frame, pos)
    header = RequestHeader(prefix.api_key, prefix.api_version, prefix.correlation_id, client_id)
    old = legacy(prefix.api_key, prefix.api_version)
    try:
        if old is not None and old.decode is not None:
            values, end = old.decode_body(bytes(frame), pos)
            body, size = build(body_type, values), end - pos
        elif prefix.api_key == ApiKey.PRODUCE:
            body, size = decode_produce_body(body_type, frame, pos)  # its records not copied
        elif prefix.api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:  # a nullable struct kio cannot read
            values, end = decode_topic_partitions_body(bytes(frame), pos)
            body, size = build(body_type, values), end - pos
        else:
            frame = bytes(frame)  # kio reads only read-only buffers (a no-op for bytes)
            check_lengths(body_type, frame, pos)  # before kio: see guard.py
            body, size = _reader(body_type)(frame, pos)
    except MalformedFrame:
        raise
    except Exception as exc:  # untrusted bytes: any decoder failure means malformed
        raise MalformedFrame(
            f"cannot decode {ApiKey(prefix.api_key).name} v{prefix.api_version}: {exc}"
        ) from exc
    if pos + size != len(frame) and strict:
        raise MalformedFrame(
            f"{len(frame) - pos - size} trailing bytes after "
            f"{ApiKey(prefix.api_key).name} v{prefix.api_version}"
        )
    # Kafka's broker ignores bytes after a request's last field, and clients rely on
    # it (librdkafka's admin client sends 3 extra bytes after Metadata v12), so by
    # default we do too.
    return Request(header, body)


def _response_header_is_flexible(api_key: int, api_version: int, body_type: type[Any]) -> bool:
    # ApiVersions always answers with header v0 so that any client can read it.
    return api_key != ApiKey.API_VERSIONS and bool(body_type.__flexible__)


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """Encode a response payload (without the size prefix) for ``header``."""
    body_type: Any = type(body)
    out = io.BytesIO()
    out.write(struct.pack(">i", header.correlation_id))
    if _response_header_is_flexible(header.api_key, header.api_version, body_type):
        out.write(b"\x00")  # no tagged fields
    old = legacy(header.api_key, header.api_version)
    if old is not None and old.encode is not None:
        out.write(old.encode(body))
    else:
        _writer(body_type)(out, body)
    return out.getvalue()


def encode_response_pieces(header: RequestHeader, body: Any) -> list[Buffer]:
    """The response payload as buffers to send in order: a Fetch answer's stored batches
    stay where they are (see :mod:`.fetch_response`), any other answer is one buffer
    (Produce's encoded by hand, see :mod:`.produce_response`)."""
    if isinstance(body, FetchAnswer):
        return encode_fetch_response(header.correlation_id, header.api_version, body)
    if isinstance(body, ProduceAnswer):
        return [encode_produce_response(header.correlation_id, header.api_version, body)]
    return [encode_response(header, body)]


# Client side, used by tests, benchmarks and tools.


def encode_request(header: RequestHeader, body: Any) -> bytes:
    body_type: Any = type(body)
    out = io.BytesIO()
    out.write(_HEADER_PREFIX.pack(header.api_key, header.api_version, header.correlation_id))
    if header.client_id is None:
        out.write(_I16.pack(-1))
    else:
        raw = header.client_id.encode()
        out.write(_I16.pack(len(raw)))
        out.write(raw)
    if body_type.__flexible__:
        out.write(b"\x00")
    _writer(body_type)(out, body)
    return out.getvalue()


def decode_response(api_key: int, api_version: int, payload: bytes | bytearray) -> tuple[int, Any]:
    """Decode a response payload; returns ``(correlation_id, body)``."""
    payload = bytes(payload)  # kio reads only read-only buffers (a no-op for bytes)
    body_type = response_class(api_key, api_version)
    (correlation_id,) = struct.unpack_from(">i", payload, 0)
    pos = 4
    if _response_header_is_flexible(api_key, api_version, body_type):
        pos = _skip_tagged_fields(payload, pos)
    try:
        body, size = _reader(body_type)(payload, pos)
    except Exception as exc:  # untrusted bytes: any decoder failure means malformed
        raise MalformedFrame(f"cannot decode response: {exc}") from exc
    return correlation_id, body
