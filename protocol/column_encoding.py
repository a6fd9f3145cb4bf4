"""Rows of Arrow-layout binary columns (keys, values) encoded as records in C
(``_record_encode``), and Kafka's default partitioner over a key column, for bulk writers
such as the Spark sink: no Python object per record. :func:`records.build_batch` is the
reference the encoder is tested against, and the fallback where the extension is not built
(``NATIVE`` is False).

A column is ``(validity bitmap or None, int32 offsets, data, array offset)``: an Arrow
binary array's buffers, as any buffer-protocol objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["NATIVE", "Column", "encode_rows", "key_partitions"]

Column = tuple[Any, Any, Any, int]

_native_encode: Callable[..., bytes] | None
_native_partitions: Callable[..., bytes] | None
try:
    from ._record_encode import encode as _native_encode
    from ._record_encode import partitions as _native_partitions
except ImportError:  # pragma: no cover - built without a C compiler
    _native_encode = _native_partitions = None

NATIVE = _native_encode is not None


def encode_rows(keys: Column, values: Column, start: int, stop: int) -> bytes:
    """The records of rows ``[start, stop)``: offset deltas from 0, timestamp deltas 0 (the
    batch's one timestamp), no headers; wrap them with :func:`records.batch_of`."""
    assert _native_encode is not None, "the _record_encode extension is not built"
    return _native_encode(keys, values, start, stop)


def key_partitions(keys: Column, count: int, partitions: int) -> bytes:
    """Little-endian int32 per row: Kafka's default partition of its key, -1 for a null key."""
    assert _native_partitions is not None, "the _record_encode extension is not built"
    return _native_partitions(keys, count, partitions)
