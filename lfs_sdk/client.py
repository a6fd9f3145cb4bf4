"""The SDK's client of the gateway's /lfs endpoint and of the pre-signed URLs it hands out.

Uploads stream: a part (at most ``part_bytes``, 64 MiB by default) is read, hashed and sent
before the next is read, so memory stays at one part whatever the object's size. Downloads
stream too and check size and checksum when the last byte has been read.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import httpx

from kafscale.protocol.lfs import LfsPointer, maybe_pointer, new_checksum, parse_pointer

__all__ = ["LfsClient", "LfsError", "ObjectStream"]

_CHUNK = 1 << 20


class LfsError(Exception):
    """The gateway or the store refused, or an object failed its check."""


def _size_of(source: BinaryIO) -> int:
    try:
        return os.fstat(source.fileno()).st_size - source.tell()
    except (OSError, AttributeError, io.UnsupportedOperation):
        pass
    try:
        here = source.tell()
        end = source.seek(0, io.SEEK_END)
        source.seek(here)
        return end - here
    except (OSError, AttributeError, io.UnsupportedOperation):
        raise LfsError("the stream's size is unknown: pass size=") from None


class _Body:
    """``length`` bytes of ``source`` as an iterator of chunks, each hashed as it passes."""

    def __init__(self, source: BinaryIO, length: int, checksum) -> None:
        self._source, self._left, self._checksum = source, length, checksum

    def __iter__(self) -> Iterator[bytes]:
        while self._left > 0:
            chunk = self._source.read(min(_CHUNK, self._left))
            if not chunk:
                raise LfsError(f"the stream ended {self._left} bytes early")
            self._left -= len(chunk)
            self._checksum.update(chunk)
            yield chunk


class ObjectStream(io.RawIOBase):
    """An LFS object's bytes as a binary stream; the last read (the one returning ``b""``)
    raises :class:`LfsError` if the size or the checksum is not the pointer's."""

    def __init__(self, pointer: LfsPointer, chunks: Iterator[bytes], close: Callable[[], None]) -> None:
        super().__init__()
        self.pointer = pointer
        self._chunks = chunks
        self._close = close
        self._pending = b""
        self._checksum = new_checksum(pointer.checksum_alg)
        self._read = 0
        self._verified = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if not self._pending:
            self._pending = next(self._chunks, b"")
            if not self._pending:
                self._verify()
                return 0
            self._read += len(self._pending)
            self._checksum.update(self._pending)
            if self._read > self.pointer.size:
                raise LfsError(f"object {self.pointer.key} is larger than its pointer's {self.pointer.size} bytes")
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def _verify(self) -> None:
        if self._verified:
            return
        if self._read != self.pointer.size:
            raise LfsError(f"object {self.pointer.key} has {self._read} bytes, its pointer says {self.pointer.size}")
        digest = self._checksum.hexdigest()
        if digest != self.pointer.checksum:
            raise LfsError(f"object {self.pointer.key}: {self.pointer.checksum_alg} {digest} is not the pointer's "
                           f"{self.pointer.checksum}")
        self._verified = True

    def close(self) -> None:
        if not self.closed:
            self._close()
        super().close()


class LfsClient:
    """A client of one gateway's HTTP endpoint (``http://host:9094``, or https with ``verify``)."""

    def __init__(self, endpoint: str, *, username: str | None = None, password: str | None = None,
                 verify: bool | str = True, timeout_s: float = 300.0) -> None:
        auth = (username, password or "") if username else None
        self._gateway = httpx.Client(base_url=endpoint.rstrip("/"), auth=auth, verify=verify, timeout=timeout_s)
        # Pre-signed URLs carry their own authorization: no gateway credentials go to the store.
        self._store = httpx.Client(timeout=timeout_s, verify=verify)
        self._settings: dict[str, dict] = {}

    def close(self) -> None:
        self._gateway.close()
        self._store.close()

    def __enter__(self) -> LfsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        response = self._gateway.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise LfsError(f"{method} {path}: {response.status_code} {response.text.strip()}")
        return response

    def topic_settings(self, topic: str) -> dict:
        """The topic's LFS settings: ``enabled``, ``min_bytes``, ``require_sdk``."""
        if topic not in self._settings:
            self._settings[topic] = self._call("GET", f"/lfs/topics/{topic}").json()
        return self._settings[topic]

    def upload(self, topic: str, source: BinaryIO | bytes | str | os.PathLike, *, size: int | None = None,
               content_type: str = "application/octet-stream", checksum: str = "sha256") -> LfsPointer:
        """Upload a file (path), a binary stream or bytes as an object of ``topic``; the pointer
        to produce. ``checksum``: sha256 (default), crc32c or md5."""
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as file:
                return self.upload(topic, file, size=size, content_type=content_type, checksum=checksum)
        if isinstance(source, (bytes, bytearray, memoryview)):
            return self.upload(topic, io.BytesIO(bytes(source)), size=len(source), content_type=content_type,
                               checksum=checksum)
        length = _size_of(source) if size is None else size
        session = self._call("POST", "/lfs/uploads", json={"topic": topic, "size": length,
                                                           "content_type": content_type,
                                                           "checksum": checksum}).json()
        hasher = new_checksum(checksum)
        parts: list[dict[str, Any]] = []
        method = session["method"]
        try:
            if method == "gateway":
                self._call("PUT", session["urls"][0], content=_Body(source, length, hasher),
                           headers={"Content-Length": str(length), "Content-Type": content_type})
            elif method == "put":
                self._put(session["urls"][0], _Body(source, length, hasher), length, content_type)
            elif method == "multipart":
                part_bytes = int(session["part_bytes"])
                for number, url in enumerate(session["urls"], start=1):
                    part = min(part_bytes, length - (number - 1) * part_bytes)
                    etag = self._put(url, _Body(source, part, hasher), part, None)
                    parts.append({"number": number, "etag": etag})
            else:
                raise LfsError(f"the gateway asked for an upload method this SDK does not know: {method!r}")
        except httpx.HTTPError as exc:
            raise LfsError(f"uploading {session['key']}: {exc}") from exc
        value = self._call("POST", f"/lfs/uploads/{session['id']}/complete",
                           json={"checksum": hasher.hexdigest(), "parts": parts}).content
        return parse_pointer(value)

    def _put(self, url: str, body: _Body, length: int, content_type: str | None) -> str:
        headers = {"Content-Length": str(length)}
        if content_type is not None:
            headers["Content-Type"] = content_type
        response = self._store.put(url, content=body, headers=headers)
        if response.status_code >= 300:
            raise LfsError(f"the store refused the upload: {response.status_code} {response.text[:500]}")
        return response.headers.get("etag", "")

    def produce(self, topic: str, value: bytes | BinaryIO | str | os.PathLike, send: Callable[[bytes], Any], *,
                size: int | None = None, content_type: str = "application/octet-stream",
                checksum: str = "sha256") -> Any:
        """Produce ``value`` with ``send`` (your client's produce, the value its only argument,
        e.g. ``lambda v: producer.produce(topic, key=k, value=v)``): as it is when it is
        smaller than the topic's min_bytes, else uploaded and replaced by its pointer."""
        threshold = int(self.topic_settings(topic)["min_bytes"])
        if isinstance(value, (bytes, bytearray, memoryview)) and len(value) < threshold:
            return send(bytes(value))
        if isinstance(value, (str, os.PathLike)) and os.path.getsize(value) < threshold:
            with open(value, "rb") as file:
                return send(file.read())
        return send(self.upload(topic, value, size=size, content_type=content_type, checksum=checksum).encode())

    def open(self, value: bytes | None) -> ObjectStream | None:
        """The object a pointer value names, as a verified stream; ``None`` if ``value`` is not
        a pointer (an ordinary record). A malformed pointer raises InvalidPointer."""
        if not maybe_pointer(value):
            return None
        assert value is not None
        pointer = parse_pointer(value)
        request = self._gateway.build_request("GET", "/lfs/objects", params={"bucket": pointer.bucket,
                                                                           "key": pointer.key})
        response = self._gateway.send(request, stream=True)
        if response.status_code in (301, 302, 303, 307, 308):
            location = response.headers["location"]
            response.close()
            response = self._store.send(self._store.build_request("GET", location), stream=True)
        if response.status_code >= 400:
            response.read()
            response.close()
            raise LfsError(f"reading {pointer.key}: {response.status_code} {response.text.strip()[:500]}")
        return ObjectStream(pointer, response.iter_bytes(_CHUNK), response.close)

    def read(self, value: bytes) -> bytes:
        """A pointer's object, whole and verified (for objects that fit in memory)."""
        stream = self.open(value)
        if stream is None:
            raise LfsError("the value is not an LFS pointer")
        with stream:
            return b"".join(iter(lambda: stream.read(_CHUNK), b""))

