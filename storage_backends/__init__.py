"""Object-store adapters behind one small interface (see :mod:`.base`)."""

from .base import (
    InvalidKey,
    ObjectChanged,
    ObjectData,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStream,
    Pieces,
    StorageError,
    StorageUnavailable,
)
from .factory import check_location, filesystem_directory, open_store
from .obstore_backend import LocalBackend, MemoryBackend, ObstoreBackend
from .s3 import S3Backend, S3Options

__all__ = [
    "InvalidKey",
    "LocalBackend",
    "MemoryBackend",
    "ObjectExists",
    "ObjectChanged",
    "ObjectData",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStream",
    "ObstoreBackend",
    "Pieces",
    "S3Backend",
    "S3Options",
    "StorageError",
    "StorageUnavailable",
    "check_location",
    "filesystem_directory",
    "open_store",
]
