"""Open a backend from a location string: a path, ``file://``, or ``memory://``."""

from __future__ import annotations

from .base import ObjectStore
from .obstore_backend import LocalBackend, MemoryBackend

__all__ = ["open_store"]


def open_store(location: str, *, fsync: bool = True) -> ObjectStore:
    """``./data`` or ``file:///abs/path`` → filesystem; ``memory://`` → in memory."""
    if location.startswith("memory://"):
        return MemoryBackend()
    if location.startswith("file://"):
        return LocalBackend(location[len("file://") :], fsync=fsync)
    if "://" in location:
        scheme = location.split("://", 1)[0]
        raise ValueError(f"unsupported storage location scheme {scheme!r} in {location!r}")
    return LocalBackend(location, fsync=fsync)
