"""Open a backend from a location string: a path, ``file://``, or ``memory://``."""

from __future__ import annotations

from .base import ObjectStore
from .obstore_backend import LocalBackend, MemoryBackend
from .s3 import S3Backend, S3Options

__all__ = ["open_store"]


def open_store(location: str, *, fsync: bool = True, s3: S3Options | None = None) -> ObjectStore:
    """``./data`` or ``file:///abs/path`` → filesystem; ``memory://`` → in memory;
    ``s3://bucket/prefix`` → S3 or an S3-compatible server (``s3`` options)."""
    if location.startswith("memory://"):
        return MemoryBackend()
    if location.startswith("s3://"):
        bucket, _, prefix = location[len("s3://"):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {location!r}")
        return S3Backend(bucket, prefix.strip("/"), s3 or S3Options())
    if location.startswith("file://"):
        return LocalBackend(location[len("file://") :], fsync=fsync)
    if "://" in location:
        scheme = location.split("://", 1)[0]
        raise ValueError(f"unsupported storage location scheme {scheme!r} in {location!r}")
    return LocalBackend(location, fsync=fsync)
