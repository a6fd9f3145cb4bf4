"""Open a backend from a location string: a path, ``file://``, or ``memory://``."""

from __future__ import annotations

from .base import ObjectStore
from .obstore_backend import LocalBackend, MemoryBackend
from .s3 import S3Backend, S3Options

__all__ = ["open_store", "check_location", "filesystem_directory", "LOCATION_FORMS"]

LOCATION_FORMS = "a path, file:///absolute/path, s3://bucket/prefix or memory://"


def check_location(location: str) -> None:
    """``ValueError`` saying what a location may be, unless ``location`` is one."""
    if not location.strip():
        raise ValueError(f"no storage location given: use {LOCATION_FORMS}")
    if "://" in location:
        scheme = location.split("://", 1)[0]
        if scheme not in ("memory", "s3", "file"):
            raise ValueError(f"unsupported storage location scheme {scheme!r} in {location!r}: use {LOCATION_FORMS}")
        if scheme == "s3" and not location[len("s3://"):].partition("/")[0]:
            raise ValueError(f"no bucket in {location!r}: use s3://bucket/prefix")


def filesystem_directory(location: str) -> str | None:
    """The directory a filesystem location names; None for memory:// and s3://."""
    check_location(location)
    if location.startswith(("memory://", "s3://")):
        return None
    return location[len("file://"):] if location.startswith("file://") else location


def open_store(location: str, *, fsync: bool = True, s3: S3Options | None = None) -> ObjectStore:
    """``./data`` or ``file:///abs/path`` → filesystem; ``memory://`` → in memory;
    ``s3://bucket/prefix`` → S3 or an S3-compatible server (``s3`` options)."""
    check_location(location)
    if location.startswith("memory://"):
        return MemoryBackend()
    if location.startswith("s3://"):
        bucket, _, prefix = location[len("s3://"):].partition("/")
        return S3Backend(bucket, prefix.strip("/"), s3 or S3Options())
    directory = filesystem_directory(location)
    assert directory is not None  # neither memory:// nor s3://, handled above
    return LocalBackend(directory, fsync=fsync)
