"""The storage interface every backend implements, and its errors.

Backends are synchronous (obstore's sync API releases the GIL); the gateway
calls them from worker threads with its own capacity limiter, except those of a
store that never waits for a disk or the network (``waits_for_io`` false: the
in-memory store), which it calls on its own thread. Keys are
``/``-separated strings relative to the store's root.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "ObjectData",
    "Pieces",
    "joined",
    "ObjectInfo",
    "ObjectStore",
    "ObjectStream",
    "StorageError",
    "ObjectNotFound",
    "ObjectExists",
    "ObjectChanged",
    "StorageUnavailable",
    "InvalidKey",
]


class StorageError(Exception):
    """Any failure of the object store."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """The key does not exist."""


class ObjectExists(StorageError):
    """put-if-absent lost: an object already exists at the key."""


class ObjectChanged(StorageError):
    """A conditional overwrite lost: the object changed (or went) since it was read."""


class StorageUnavailable(StorageError):
    """The store could not be reached or failed the request (retriable)."""


class InvalidKey(StorageError, ValueError):
    """The store cannot name this key (a "." or ".." segment, an empty one...): never retriable."""


class Pieces(tuple):
    """One object's bytes as the buffers that make it up, in order: written as they are where
    the store can (the filesystem writes them with one writev), joined once where it cannot."""

    __slots__ = ()

    @property
    def nbytes(self) -> int:
        return sum(memoryview(piece).nbytes for piece in self)


ObjectData = bytes | bytearray | memoryview | Pieces


def joined(data: ObjectData) -> bytes | bytearray | memoryview:
    """``data`` as one buffer (``Pieces`` joined; anything else as it is)."""
    return b"".join(data) if isinstance(data, Pieces) else data


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


@runtime_checkable
class ObjectStream(Protocol):
    """An object being written piece by piece (:meth:`ObjectStore.open_stream`); each call is
    short, so no thread waits on whoever supplies the pieces."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None:
        """The object, whole and durable when this returns."""

    def abort(self) -> None:
        """Discard what was written: nothing becomes visible."""


class ObjectStore(Protocol):
    """A small object-store interface: whole-object writes, ranged reads, sorted listings."""

    # Whether a call may wait for a disk or the network (a worker thread's job); false for a
    # store held in this process's memory, whose calls only compute and copy.
    waits_for_io: bool

    def put(self, key: str, data: bytes, *, durable: bool = True) -> None:
        """Write (or replace) the object at ``key``; durable when this returns unless
        ``durable=False`` (for derived data that can be rebuilt, e.g. indexes)."""

    def put_if_absent(self, key: str, data: ObjectData) -> str:
        """Create the object at ``key`` atomically; :class:`ObjectExists` if it exists.
        Returns its version (as :meth:`get_versioned` gives it; ``""`` if the store did not say)."""

    def open_stream(self, key: str) -> ObjectStream:
        """A writer of (or over) the object at ``key`` fed in pieces as they come, holding a
        few parts in memory at most (large objects: LFS uploads on the filesystem): nothing is
        visible until :meth:`ObjectStream.close`, nor ever after :meth:`ObjectStream.abort`."""

    def get(self, key: str) -> bytes:
        """The whole object; :class:`ObjectNotFound` if missing."""

    def get_view(self, key: str) -> memoryview:
        """The whole object, read-only, without copying it out of the backend's buffer (bulk
        readers parse it in place); :class:`ObjectNotFound` if missing."""

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """The whole object and an opaque version of it, for :meth:`put_if_unchanged`."""

    def put_if_unchanged(self, key: str, data: bytes, version: str) -> str:
        """Replace the object atomically only if it is still at ``version``;
        :class:`ObjectChanged` if it changed or is gone. Durable when this returns.
        Returns the new version (``""`` if the store did not say)."""

    def version(self, key: str) -> str | None:
        """The object's current version (as :meth:`get_versioned` gives it), or ``None`` if
        missing: one HEAD."""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (shorter if the object is)."""

    def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        """:meth:`get_range`, read-only and without copying it out of the backend's buffer
        (what a gateway caches and serves as it came)."""

    def head(self, key: str) -> ObjectInfo | None:
        """Size of the object, or ``None`` if missing."""

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix``, sorted by key."""

    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error."""

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove the objects, in as few requests as the store allows (S3: one DeleteObjects
        POST, a billed request, per 1,000 keys); missing keys are not an error."""

    def describe(self) -> str:
        """A short human description (for logs and /readyz)."""

    def check(self) -> None:
        """Raise :class:`StorageError` with a clear message if the store is unusable."""
