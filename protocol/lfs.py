"""Large File Support's shared format: the pointer record v1, its checksums, and where objects go.

A pointer is an ordinary record value, compact JSON::

    {"kfs_lfs":1,"bucket":"b","key":"ns/topic/lfs/2026/11/24/<uuid>","size":1048576,
     "sha256":"<hex>","content_type":"application/octet-stream","created_at":"2026-11-24T12:00:00Z"}

``kfs_lfs``, ``bucket``, ``key``, ``size`` and a checksum are mandatory. The checksum is
``sha256`` by default; a writer that chose a cheaper one (``crc32c``, ``md5``) names it in
``checksum_alg`` and gives it in ``checksum`` instead. Sans-io: the gateway, the SDK and the
Spark reader parse the same bytes the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import crc32c

__all__ = ["LfsPointer", "InvalidPointer", "CHECKSUMS", "new_checksum", "parse_pointer", "maybe_pointer",
           "object_key", "object_id", "id_time_ms", "POINTER_LIMIT", "topic_of_key"]

# A pointer is small; a value larger than this is never parsed as one.
POINTER_LIMIT = 4096
_MARK = b'"kfs_lfs"'
CHECKSUMS = ("sha256", "crc32c", "md5")


class InvalidPointer(ValueError):
    """A value that claims to be a pointer (it has ``kfs_lfs``) and is not a valid one."""


class Checksum(Protocol):
    def update(self, data: bytes | memoryview, /) -> None: ...
    def hexdigest(self) -> str: ...


class _Crc32c:
    def __init__(self) -> None:
        self._value = 0

    def update(self, data: bytes | memoryview) -> None:
        self._value = crc32c.crc32c(data, self._value)

    def hexdigest(self) -> str:
        return f"{self._value:08x}"


def new_checksum(algorithm: str) -> Checksum:
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "md5":
        return hashlib.md5(usedforsecurity=False)
    if algorithm == "crc32c":
        return _Crc32c()
    raise ValueError(f"unknown checksum {algorithm!r} (one of {', '.join(CHECKSUMS)})")


@dataclass(frozen=True, slots=True)
class LfsPointer:
    bucket: str
    key: str
    size: int
    checksum: str  # hex
    checksum_alg: str = "sha256"
    content_type: str | None = None
    created_at: str | None = None  # RFC 3339, UTC

    def encode(self) -> bytes:
        document: dict[str, object] = {"kfs_lfs": 1, "bucket": self.bucket, "key": self.key, "size": self.size}
        if self.checksum_alg == "sha256":
            document["sha256"] = self.checksum
        else:
            document["checksum_alg"] = self.checksum_alg
            document["checksum"] = self.checksum
        if self.content_type is not None:
            document["content_type"] = self.content_type
        if self.created_at is not None:
            document["created_at"] = self.created_at
        return json.dumps(document, separators=(",", ":")).encode()

    @property
    def object_id(self) -> str:
        return self.key.rsplit("/", 1)[-1]


def maybe_pointer(value: bytes | memoryview | None) -> bool:
    """Cheap test: could this value be a pointer (small, JSON, names ``kfs_lfs``)?"""
    if value is None or len(value) > POINTER_LIMIT or len(value) < 2:
        return False
    head = bytes(value[:1])
    return head == b"{" and _MARK in bytes(value)


def _string(document: dict, name: str, required: bool) -> str | None:
    value = document.get(name)
    if value is None:
        if required:
            raise InvalidPointer(f"pointer has no {name}")
        return None
    if not isinstance(value, str) or (required and not value):
        raise InvalidPointer(f"pointer's {name} is not a non-empty string")
    return value


def parse_pointer(value: bytes | memoryview) -> LfsPointer:
    """The pointer in ``value``; :class:`InvalidPointer` says what is wrong with it."""
    if len(value) > POINTER_LIMIT:
        raise InvalidPointer(f"a pointer is at most {POINTER_LIMIT} bytes, this value has {len(value)}")
    try:
        document = json.loads(bytes(value))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidPointer(f"pointer is not JSON: {exc}") from None
    if not isinstance(document, dict) or "kfs_lfs" not in document:
        raise InvalidPointer("not a pointer: no kfs_lfs field")
    if document["kfs_lfs"] != 1 or isinstance(document["kfs_lfs"], bool):
        raise InvalidPointer(f"unsupported pointer version {document['kfs_lfs']!r} (this reader knows 1)")
    bucket = _string(document, "bucket", True)
    key = _string(document, "key", True)
    size = document.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidPointer(f"pointer's size {size!r} is not a non-negative integer")
    algorithm = document.get("checksum_alg", "sha256")
    if algorithm not in CHECKSUMS:
        raise InvalidPointer(f"pointer's checksum_alg {algorithm!r} is not one of {', '.join(CHECKSUMS)}")
    checksum = _string(document, "sha256" if algorithm == "sha256" else "checksum", True)
    assert bucket is not None and key is not None and checksum is not None
    try:
        int(checksum, 16)
    except ValueError:
        raise InvalidPointer(f"pointer's {algorithm} is not hex") from None
    return LfsPointer(bucket, key, size, checksum.lower(), algorithm,
                      _string(document, "content_type", False), _string(document, "created_at", False))


def object_id(now_ms: int | None = None) -> str:
    """A new object's id: a UUID version 7 (RFC 9562), whose first 48 bits are its creation
    time in ms, so the clean-up can age an object from its name alone."""
    millis = int(time.time() * 1000) if now_ms is None else now_ms
    raw = bytearray(millis.to_bytes(6, "big") + os.urandom(10))
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(raw)))


def id_time_ms(identifier: str) -> int | None:
    """The creation time in an id made by :func:`object_id`; None for anything else."""
    try:
        parsed = uuid.UUID(identifier)
    except ValueError:
        return None
    return parsed.int >> 80 if parsed.version == 7 else None


def object_key(prefix: str, topic: str, identifier: str) -> str:
    """``{prefix}/{topic}/lfs/{yyyy}/{mm}/{dd}/{id}``; the date is the id's (UTC)."""
    millis = id_time_ms(identifier)
    day = datetime.fromtimestamp((millis or 0) / 1000, tz=UTC)
    return f"{prefix}/{topic}/lfs/{day:%Y/%m/%d}/{identifier}"


def topic_of_key(key: str) -> str | None:
    """The topic of an object key made by :func:`object_key` (``.../{topic}/lfs/yyyy/mm/dd/{id}``)."""
    parts = key.split("/")
    return parts[-6] if len(parts) >= 6 and parts[-5] == "lfs" else None
