"""The SDK's client of the gateway's /lfs endpoint and of the pre-signed URLs it hands out.

Uploads stream: a part (at most ``part_bytes``, 64 MiB by default) is read, hashed and sent
before the next is read, so memory stays at one part whatever the object's size. Downloads
stream too and check size and checksum when the last byte has been read.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import httpx

from kafscale.protocol.lfs import LfsPointer, maybe_pointer, new_checksum, parse_pointer

__all__ = ["LfsClient", "LfsError", "ObjectStream"]

_CHUNK = 1 << 20


class LfsError(Exception):
    """The gateway or the store refused, or an object failed its check."""


def _size_of(source: BinaryIO) -> int | None:
    """The bytes left in ``source``: a regular file's or a seekable stream's; None for a pipe,
    a socket or a generator's stream, uploaded part by part until its end."""
    try:
        status = os.fstat(source.fileno())
        if stat.S_ISREG(status.st_mode):
            return status.st_size - source.tell()
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        pass
    try:
        if not source.seekable():
            return None
        here = source.tell()
        end = source.seek(0, io.SEEK_END)
        source.seek(here)
        return end - here
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None


class _Body:
    """``length`` bytes of ``source`` (None: all of it) as an iterator of chunks, each hashed as
    it passes."""

    def __init__(self, source: BinaryIO, length: int | None, checksum) -> None:
        self._source, self._left, self._checksum = source, length, checksum

    def __iter__(self) -> Iterator[bytes]:
        while self._left is None or self._left > 0:
            chunk = self._source.read(_CHUNK if self._left is None else min(_CHUNK, self._left))
            if not chunk:
                if self._left is None:
                    return
                raise LfsError(f"the stream ended {self._left} bytes early")
            if self._left is not None:
                self._left -= len(chunk)
            self._checksum.update(chunk)
            yield chunk


class _Joined(io.RawIOBase):
    """``head`` then the rest of ``rest``: a stream whose first bytes were already read."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


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
        document: dict[str, Any] = {"topic": topic, "content_type": content_type, "checksum": checksum}
        if length is not None:
            document["size"] = length
        session = self._call("POST", "/lfs/uploads", json=document).json()
        hasher = new_checksum(checksum)
        parts: list[dict[str, Any]] = []
        method = session["method"]
        try:
            if method == "gateway":
                headers = {"Content-Type": content_type}
                if length is not None:
                    headers["Content-Length"] = str(length)  # else chunked
                self._call("PUT", session["urls"][0], content=_Body(source, length, hasher), headers=headers)
            elif method == "put":
                assert length is not None
                self._put(session["urls"][0], _Body(source, length, hasher), length, content_type)
            elif method == "multipart" and length is not None:
                part_bytes = int(session["part_bytes"])
                for number, url in enumerate(session["urls"], start=1):
                    part = min(part_bytes, length - (number - 1) * part_bytes)
                    etag = self._put(url, _Body(source, part, hasher), part, None)
                    parts.append({"number": number, "etag": etag})
            elif method == "multipart":
                parts = self._stream_parts(session, source, hasher)
            else:
                raise LfsError(f"the gateway asked for an upload method this SDK does not know: {method!r}")
        except httpx.HTTPError as exc:
            raise LfsError(f"uploading {session['key']}: {exc}") from exc
        value = self._call("POST", f"/lfs/uploads/{session['id']}/complete",
                           json={"checksum": hasher.hexdigest(), "parts": parts}).content
        return parse_pointer(value)

    def _stream_parts(self, session: dict, source: BinaryIO, hasher) -> list[dict[str, Any]]:
        """A stream of unknown size: one part in memory at a time, its URL asked for as it comes
        (16 at a time)."""
        part_bytes = int(session["part_bytes"])
        urls: list[str] = []
        parts: list[dict[str, Any]] = []
        while True:
            data = bytearray()
            while len(data) < part_bytes and (chunk := source.read(min(_CHUNK, part_bytes - len(data)))):
                data += chunk
            if not data and parts:
                return parts
            number = len(parts) + 1
            if number > len(urls):
                urls += self._call("POST", f"/lfs/uploads/{session['id']}/parts",
                                   json={"first": number, "count": 16}).json()["urls"]
            hasher.update(data)
            parts.append({"number": number, "etag": self._put(urls[number - 1], bytes(data), len(data), None)})
            if len(data) < part_bytes:
                return parts

    def _put(self, url: str, body: _Body | bytes, length: int, content_type: str | None) -> str:
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
        if isinstance(value, (bytes, bytearray, memoryview)):
            if len(value) < threshold:
                return send(bytes(value))
        elif isinstance(value, (str, os.PathLike)):
            if os.path.getsize(value) < threshold:
                with open(value, "rb") as file:
                    return send(file.read())
        elif size is None and _size_of(value) is None:
            # A stream of unknown size: below the threshold it goes as it is; it is read that far
            # first (min_bytes in memory at most), then uploaded from those bytes on.
            head = bytearray()
            while len(head) < threshold and (chunk := value.read(min(_CHUNK, threshold - len(head)))):
                head += chunk
            if len(head) < threshold:
                return send(bytes(head))
            value = io.BufferedReader(_Joined(bytes(head), value))
        elif (size if size is not None else _size_of(value) or 0) < threshold:
            return send(value.read())
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

