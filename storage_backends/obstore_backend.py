"""Adapters from obstore stores to our :class:`ObjectStore` interface."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from pathlib import Path

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import LocalStore, MemoryStore

from .base import (
    InvalidKey,
    ObjectChanged,
    ObjectData,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    Pieces,
    StorageError,
    StorageUnavailable,
    joined,
)

__all__ = ["ObstoreBackend", "LocalBackend", "MemoryBackend"]

_STREAM_PART = 8 * 2**20


class ObstoreBackend:
    """Any obstore store behind our interface, with its errors translated."""

    waits_for_io = True

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

    def put_if_absent(self, key: str, data: ObjectData) -> str:
        result = self._call(obstore.put, key, joined(data), mode="create")
        self._made_durable(key)
        return result.get("e_tag") or ""

    def open_stream(self, key: str) -> _Stream:
        # Multipart on S3, a staged file renamed into place on disk: a few parts in memory at once.
        return _Stream(self, key, self._call(obstore.open_writer, key, buffer_size=_STREAM_PART, max_concurrency=2))

    def get(self, key: str) -> bytes:
        return bytes(self._call(obstore.get, key).bytes())

    def get_view(self, key: str) -> memoryview:
        return memoryview(self._call(obstore.get, key).bytes())  # obstore's Bytes lends its buffer

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        result = self._call(obstore.get, key)
        return bytes(result.bytes()), result.meta["e_tag"] or ""

    def put_if_unchanged(self, key: str, data: bytes, version: str) -> str:
        try:  # If-Match on S3 (and S3-compatible servers): checked by the store, atomically
            result = self._call(obstore.put, key, data, mode={"e_tag": version})
        except ObjectNotFound as exc:  # gone since it was read: changed too
            raise ObjectChanged(key) from exc
        self._made_durable(key)
        return result.get("e_tag") or ""

    def version(self, key: str) -> str | None:
        try:
            meta = self._call(obstore.head, key)
        except ObjectNotFound:
            return None
        return meta["e_tag"] or ""

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(self.get_range_view(key, start, end))

    def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        if end <= start:
            return memoryview(b"")
        try:  # one request: the stores clip an end past the object themselves
            return memoryview(self._call(obstore.get_range, key, start=start, end=end))  # Bytes lends its buffer
        except StorageUnavailable:
            # A start at or past the end is refused as an invalid range; only then is
            # a HEAD worth its request, to tell that (b"") from a real failure.
            info = self.head(key)
            if info is None:
                raise ObjectNotFound(key) from None
            if start >= info.size:
                return memoryview(b"")
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
        except Exception as exc:
            raise translated(exc, "list", prefix) from exc
        # LocalStore lists in directory order; callers rely on key order.
        return sorted((ObjectInfo(item["path"], item["size"]) for item in items), key=lambda i: i.key)

    def delete(self, key: str) -> None:
        try:
            self._call(obstore.delete, key)
        except ObjectNotFound:
            pass

    def delete_many(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        try:
            obstore.delete(self._store, list(keys))
        except FileNotFoundError:  # some were gone already: delete the rest one by one
            for key in keys:
                self.delete(key)
        except Exception as exc:
            raise translated(exc, f"delete of {len(keys)} objects from", keys[0]) from exc

    def _call(self, function, key: str, *args, **kwargs):
        try:
            return function(self._store, key, *args, **kwargs)
        except Exception as exc:
            raise translated(exc, function.__name__, key) from exc

    def _made_durable(self, key: str) -> None:
        """Hook for backends whose writes are not durable when the call returns."""


class _Stream:
    """obstore's writer: dropped unclosed, it discards its staged parts."""

    def __init__(self, backend: ObstoreBackend, key: str, writer) -> None:
        self._backend = backend
        self._key = key
        self._writer = writer

    def _call(self, what: str, function, *args) -> None:
        if self._writer is None:
            raise StorageUnavailable(f"{what} {self._key}: the stream is closed")
        try:
            function(*args)
        except Exception as exc:
            self._writer = None
            raise translated(exc, what, self._key) from exc

    def write(self, data: bytes) -> None:
        self._call("write", self._writer.write, data)

    def close(self) -> None:
        self._call("close", self._writer.close)
        self._writer = None
        self._backend._made_durable(self._key)

    def abort(self) -> None:
        self._writer = None


class LocalBackend(ObstoreBackend):
    """The local filesystem; writes are fsync'd (file and directory) before returning."""

    def __init__(self, root: str | os.PathLike, *, fsync: bool = True) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        super().__init__(LocalStore(str(self.root), mkdir=True), f"file://{self.root}")
        self._fsync = fsync
        self._root = str(self.root)
        self._durable_dirs: set[str] = set()
        self._unnamed_files = _unnamed_files_work(self._root)

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        try:
            with open(self.root / key, "rb") as file:
                return file.read(), _file_version(os.fstat(file.fileno()))
        except OSError as exc:
            raise translated(exc, "get", key) from exc

    def version(self, key: str) -> str | None:
        try:
            return _file_version(os.stat(self.root / key))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise translated(exc, "head", key) from exc

    def put_if_absent(self, key: str, data: ObjectData) -> str:
        """A new file linked into place (a link never replaces: a second writer gets
        FileExistsError); its version is the written inode's, taken before it is visible.

        The gateway's hot path (a log object per flush): plain string paths, the directory
        opened once, and the file's data fsync'd once, before the link; then only the new
        entry's directory. The file is written without a name where the filesystem allows it
        (``O_TMPFILE``): no temporary name to make and remove, which took a third of the
        object's CPU."""
        path = os.path.join(self._root, key)
        directory, name = os.path.split(path)
        try:
            try:
                dir_fd = os.open(directory, _DIRECTORY_FLAGS)
            except FileNotFoundError:  # the first object under a new directory
                os.makedirs(directory, exist_ok=True)
                dir_fd = os.open(directory, _DIRECTORY_FLAGS)
        except OSError as exc:
            raise translated(exc, "put", key) from exc
        try:
            try:
                if self._unnamed_files:
                    written = self._link_unnamed(dir_fd, name, data)
                else:
                    written = self._link_named(path, data)
            except OSError as exc:
                raise translated(exc, "put", key) from exc
            if self._fsync:
                try:
                    os.fsync(dir_fd)
                    self._parents_durable(directory)
                except OSError as exc:
                    raise translated(exc, "fsync", key) from exc
        finally:
            os.close(dir_fd)
        return written

    def _link_unnamed(self, dir_fd: int, name: str, data: ObjectData) -> str:
        fd = os.open(".", _UNNAMED_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            written = self._fill(fd, data)
            # linkat(AT_SYMLINK_FOLLOW) on the descriptor's /proc link: CPython calls linkat
            # (not link, which would link the symlink itself) when a directory fd is given.
            os.link(f"/proc/self/fd/{fd}", name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=True)
            return written
        finally:
            os.close(fd)

    def _link_named(self, path: str, data: ObjectData) -> str:
        """Where unnamed files are not to be had (overlayfs before Linux 6.6, no /proc): a
        temporary name beside ``path``, linked into place and removed."""
        temporary = _temporary(path)
        try:
            written = self._write_file(temporary, data)
            os.link(temporary, path)
            return written
        finally:
            _discard(temporary)

    def put_if_unchanged(self, key: str, data: bytes, version: str) -> str:
        """obstore's LocalStore has no conditional update: the file is locked, its version
        checked, and a new file renamed over it. A second writer locks the replaced inode
        or the new one, and either way finds the version changed."""
        path = os.path.join(self._root, key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise ObjectChanged(key) from exc
        except OSError as exc:
            raise translated(exc, "put", key) from exc
        temporary = _temporary(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path)
            except FileNotFoundError as exc:
                raise ObjectChanged(key) from exc
            if current.st_ino != os.fstat(fd).st_ino or _file_version(current) != version:
                raise ObjectChanged(key)
            written = self._write_file(temporary, data)
            os.rename(temporary, path)
            if self._fsync:
                _fsync_path(os.path.dirname(path))
        except OSError as exc:
            _discard(temporary)
            raise translated(exc, "put", key) from exc
        finally:
            os.close(fd)
        return written

    def _write_file(self, path: str, data: ObjectData) -> str:
        """A new file holding ``data`` (fsync'd); its version, which a rename or link keeps."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            return self._fill(fd, data)
        finally:
            os.close(fd)

    def _fill(self, fd: int, data: ObjectData) -> str:
        _write_all(fd, list(data) if isinstance(data, Pieces) else [data])
        if self._fsync:
            os.fsync(fd)
        return _file_version(os.fstat(fd))

    def _made_durable(self, key: str) -> None:
        if not self._fsync:
            return
        path = os.path.join(self._root, key)
        try:
            _fsync_path(path)
            _fsync_path(os.path.dirname(path))
            self._parents_durable(os.path.dirname(path))
        except OSError as exc:
            raise translated(exc, "fsync", key) from exc

    def _parents_durable(self, directory: str) -> None:
        """After a new entry of ``directory`` reached the disk: the directories above it, only
        the first time we see them (they may have just been created)."""
        while directory != self._root and directory.startswith(self._root + os.sep):
            if directory in self._durable_dirs:
                break
            parent = os.path.dirname(directory)
            _fsync_path(parent)
            self._durable_dirs.add(directory)
            directory = parent


def translated(exc: Exception, what: str, key: str) -> StorageError:
    """obstore's and the operating system's errors as ours: one table for every operation.
    Anything else (a bug of ours) is raised as it is."""
    if isinstance(exc, StorageError):
        return exc  # translated already
    if isinstance(exc, (AlreadyExistsError, FileExistsError)):
        return ObjectExists(key)
    if isinstance(exc, PreconditionError):
        return ObjectChanged(key)
    if isinstance(exc, (NotFoundError, FileNotFoundError)):
        return ObjectNotFound(key)
    if isinstance(exc, (BaseError, OSError)):
        return StorageUnavailable(f"{what} {key}: {_reason(exc)}")
    if isinstance(exc, (TypeError, ValueError)):  # obstore's path parsing: the key, not the store
        return InvalidKey(f"{what} {key!r}: not a key this store can name ({exc})")
    raise exc


def _reason(exc: BaseException) -> str:
    """obstore's message without the multi-line debug dump it appends (one log line)."""
    text = str(exc).split("\n\nDebug source:", 1)[0]
    return " ".join(text.split())


def _temporary(path: str) -> str:
    """A name beside ``path`` no other writer uses (listings of segments skip it)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_IOV_MAX = 1024  # Linux's UIO_MAXIOV: the most buffers one writev takes


def _write_all(fd: int, pieces: list) -> None:
    """Write ``pieces`` in order with as few writev calls as the kernel allows (no join)."""
    views = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        while written and views:
            if written >= len(views[0]):
                written -= len(views.pop(0))
            else:
                views[0] = views[0][written:]
                written = 0


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY
_UNNAMED_FLAGS = os.O_WRONLY | getattr(os, "O_TMPFILE", 0)


def _unnamed_files_work(root: str) -> bool:
    """Whether files can be made without a name under ``root`` and linked in by /proc."""
    if not hasattr(os, "O_TMPFILE") or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        os.close(os.open(root, _UNNAMED_FLAGS, 0o644))
    except OSError:  # EOPNOTSUPP, EISDIR or EINVAL where the filesystem has no O_TMPFILE
        return False
    return True


def _file_version(stat: os.stat_result) -> str:
    return f"{stat.st_ino:x}-{stat.st_mtime_ns:x}-{stat.st_size:x}"


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryBackend(ObstoreBackend):
    """obstore's in-memory store: for tests and benchmarks, nothing survives the process."""

    waits_for_io = False

    def __init__(self) -> None:
        super().__init__(MemoryStore(), "memory://")
