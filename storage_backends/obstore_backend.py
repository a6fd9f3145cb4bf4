"""Adapters from obstore stores to our :class:`ObjectStore` interface."""

from __future__ import annotations

import os
from pathlib import Path

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError
from obstore.store import LocalStore, MemoryStore

from .base import ObjectExists, ObjectInfo, ObjectNotFound, StorageUnavailable

__all__ = ["ObstoreBackend", "LocalBackend", "MemoryBackend"]


class ObstoreBackend:
    """Any obstore store behind our interface, with its errors translated."""

    def __init__(self, store, description: str) -> None:
        self._store = store
        self._description = description

    def describe(self) -> str:
        return self._description

    def check(self) -> None:
        self.list("~probe/")

    def put(self, key: str, data: bytes, *, durable: bool = True) -> None:
        self._call(obstore.put, key, data, mode="overwrite")
        if durable:
            self._made_durable(key)

    def put_if_absent(self, key: str, data: bytes) -> None:
        try:
            obstore.put(self._store, key, data, mode="create")
        except AlreadyExistsError as exc:
            raise ObjectExists(key) from exc
        except FileExistsError as exc:
            raise ObjectExists(key) from exc
        except BaseError as exc:
            raise StorageUnavailable(f"put {key}: {_reason(exc)}") from exc
        except OSError as exc:
            raise StorageUnavailable(f"put {key}: {_reason(exc)}") from exc
        self._made_durable(key)

    def get(self, key: str) -> bytes:
        return bytes(self._call(obstore.get, key).bytes())

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:  # one request: the stores clip an end past the object themselves
            return bytes(self._call(obstore.get_range, key, start=start, end=end))
        except StorageUnavailable:
            # A start at or past the end is refused as an invalid range; only then is
            # a HEAD worth its request, to tell that (b"") from a real failure.
            info = self.head(key)
            if info is None:
                raise ObjectNotFound(key) from None
            if start >= info.size:
                return b""
            raise

    def head(self, key: str) -> ObjectInfo | None:
        try:
            meta = self._call(obstore.head, key)
        except ObjectNotFound:
            return None
        return ObjectInfo(meta["path"], meta["size"])

    def list(self, prefix: str) -> list[ObjectInfo]:
        prefix = prefix.rstrip("/")
        try:
            items = obstore.list(self._store, prefix=prefix or None).collect()
        except FileNotFoundError:
            return []
        except (BaseError, OSError) as exc:
            raise StorageUnavailable(f"list {prefix}: {_reason(exc)}") from exc
        # LocalStore lists in directory order; callers rely on key order.
        return sorted((ObjectInfo(item["path"], item["size"]) for item in items), key=lambda i: i.key)

    def delete(self, key: str) -> None:
        try:
            self._call(obstore.delete, key)
        except ObjectNotFound:
            pass

    def _call(self, function, key: str, *args, **kwargs):
        try:
            return function(self._store, key, *args, **kwargs)
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc
        except (BaseError, OSError) as exc:
            raise StorageUnavailable(f"{function.__name__} {key}: {_reason(exc)}") from exc

    def _made_durable(self, key: str) -> None:
        """Hook for backends whose writes are not durable when the call returns."""


class LocalBackend(ObstoreBackend):
    """The local filesystem; writes are fsync'd (file and directory) before returning."""

    def __init__(self, root: str | os.PathLike, *, fsync: bool = True) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        super().__init__(LocalStore(str(self.root), mkdir=True), f"file://{self.root}")
        self._fsync = fsync
        self._durable_dirs: set[Path] = set()

    def _made_durable(self, key: str) -> None:
        if not self._fsync:
            return
        path = self.root / key
        try:
            _fsync_path(path)
            # The new directory entry must reach the disk too; directories above it
            # only once, the first time we see them (they may have just been created).
            directory = path.parent
            _fsync_path(directory)
            while directory != self.root and self.root in directory.parents:
                parent = directory.parent
                if directory in self._durable_dirs:
                    break
                _fsync_path(parent)
                self._durable_dirs.add(directory)
                directory = parent
        except OSError as exc:
            raise StorageUnavailable(f"fsync {key}: {exc}") from exc


def _reason(exc: BaseException) -> str:
    """obstore's message without the multi-line debug dump it appends (one log line)."""
    text = str(exc).split("\n\nDebug source:", 1)[0]
    return " ".join(text.split())


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryBackend(ObstoreBackend):
    """obstore's in-memory store: for tests and benchmarks, nothing survives the process."""

    def __init__(self) -> None:
        super().__init__(MemoryStore(), "memory://")
