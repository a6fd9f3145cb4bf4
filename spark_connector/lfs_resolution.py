"""Option ``lfs.resolve``: what a read does with LFS pointer records (docs/lfs.md).

- ``none`` (default): values as stored; a pointer is a small JSON value like any other.
- ``bytes``: a pointer's value is replaced by its object's bytes, read from the store and
  checked against the pointer's size and checksum (a mismatch fails the task); objects above
  ``lfs.maxBytes`` (128 MiB by default) fail the task, pointing at ``uri``.
- ``uri``: values stay as stored and a column ``lfs_uri`` gives each pointer's object
  (``s3://bucket/key``, or ``file:///...`` on the filesystem), null for other records, for
  jobs that read big objects themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from kafscale.protocol.lfs import LfsPointer, maybe_pointer, new_checksum, parse_pointer
from kafscale.storage_backends import ObjectStore, open_store

from .errors import OptionError
from .options import ReadOptions

__all__ = ["resolve_pointers", "LFS_URI_DDL", "LfsObjectError", "MODES"]

LFS_URI_DDL = ", lfs_uri string"
MODES = ("none", "bytes", "uri")
_LOCAL_BUCKET = "local"  # the gateway's name for its filesystem store
_SLICE_BYTES = 1 << 30


class LfsObjectError(Exception):
    """A pointer's object is missing, too large to inline, or fails its check."""


class _Objects:
    """The stores pointers name: the read's own location, or an S3 bucket at its root."""

    def __init__(self, options: ReadOptions, location: ObjectStore) -> None:
        self._options = options
        self._location = location
        self._buckets: dict[str, ObjectStore] = {}

    def uri(self, pointer: LfsPointer) -> str:
        if pointer.bucket == _LOCAL_BUCKET and not self._options.path.startswith("s3://"):
            root = Path(self._options.path.removeprefix("file://")).resolve()
            return f"file://{root / pointer.key}"
        return f"s3://{pointer.bucket}/{pointer.key}"

    def _store(self, pointer: LfsPointer) -> tuple[ObjectStore, str]:
        if not self._options.path.startswith("s3://"):
            if pointer.bucket != _LOCAL_BUCKET:
                raise LfsObjectError(f"pointer to s3://{pointer.bucket}/{pointer.key}: this read is on the "
                                     f"filesystem ({self._options.path})")
            return self._location, pointer.key
        store = self._buckets.get(pointer.bucket)
        if store is None:
            store = self._buckets[pointer.bucket] = open_store(f"s3://{pointer.bucket}", s3=self._options.s3_options())
        return store, pointer.key

    def read(self, pointer: LfsPointer, limit: int) -> bytes:
        if pointer.size > limit:
            raise LfsObjectError(f"{self.uri(pointer)} has {pointer.size} bytes, more than lfs.maxBytes={limit}: "
                                 "read it with lfs.resolve=uri")
        store, key = self._store(pointer)
        try:
            data = store.get(key)
        except FileNotFoundError:
            raise LfsObjectError(f"{self.uri(pointer)}: the pointer's object does not exist") from None
        if len(data) != pointer.size:
            raise LfsObjectError(f"{self.uri(pointer)} has {len(data)} bytes, its pointer says {pointer.size}")
        checksum = new_checksum(pointer.checksum_alg)
        checksum.update(data)
        if checksum.hexdigest() != pointer.checksum:
            raise LfsObjectError(f"{self.uri(pointer)}: {pointer.checksum_alg} {checksum.hexdigest()} is not the "
                                 f"pointer's {pointer.checksum}")
        return data


def _pointers(values: list[bytes | None]) -> list[tuple[int, LfsPointer]]:
    found = []
    for index, value in enumerate(values):
        if value is not None and maybe_pointer(value):
            found.append((index, parse_pointer(value)))
    return found


def resolve_pointers(batches: Iterator[pa.RecordBatch], options: ReadOptions,
                     location: ObjectStore) -> Iterator[pa.RecordBatch]:
    if options.lfs_resolve == "none":
        yield from batches
        return
    if options.lfs_resolve not in MODES:
        raise OptionError(f"option lfs.resolve must be one of {', '.join(MODES)}")
    objects = _Objects(options, location)
    for batch in batches:
        values = batch.column("value").to_pylist()
        pointers = _pointers(values)
        if options.lfs_resolve == "uri":
            uris: list[str | None] = [None] * batch.num_rows
            for index, pointer in pointers:
                uris[index] = objects.uri(pointer)
            yield pa.RecordBatch.from_arrays([*batch.columns, pa.array(uris, pa.string())],
                                             schema=batch.schema.append(pa.field("lfs_uri", pa.string())))
            continue
        if not pointers:
            yield batch
            continue
        yield from _inline(batch, values, pointers, objects, options.lfs_max_bytes)


def _inline(batch: pa.RecordBatch, values: list, pointers: list[tuple[int, LfsPointer]], objects: _Objects,
            limit: int) -> Iterator[pa.RecordBatch]:
    """``batch`` with its pointers' values replaced by their objects, in slices whose values stay
    under Arrow's 2 GiB per binary column (objects are inlined a slice at a time)."""
    column = batch.schema.get_field_index("value")
    pending = dict(pointers)
    start = 0
    while start < batch.num_rows:
        end, total = start, 0
        chunk: list[bytes | None] = []
        while end < batch.num_rows:
            value = values[end]
            size = pending[end].size if end in pending else len(value or b"")
            if chunk and total + size > _SLICE_BYTES:
                break
            chunk.append(objects.read(pending[end], limit) if end in pending else value)
            total += size
            end += 1
        piece = batch.slice(start, end - start)
        yield piece.set_column(column, "value", pa.array(chunk, pa.binary()))
        start = end
