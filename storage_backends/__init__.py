"""Object-store adapters behind one small interface (see :mod:`.base`)."""

from .base import ObjectExists, ObjectInfo, ObjectNotFound, ObjectStore, StorageError, StorageUnavailable
from .factory import open_store
from .obstore_backend import LocalBackend, MemoryBackend, ObstoreBackend

__all__ = [
    "LocalBackend",
    "MemoryBackend",
    "ObjectExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObstoreBackend",
    "StorageError",
    "StorageUnavailable",
    "open_store",
]
