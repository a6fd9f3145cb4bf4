"""A batch's records appended to Arrow-layout column buffers by the C decoder
(``_record_columns``), for bulk readers such as the Spark source: no Python object per
record. :func:`records.decode_columns` is the reference it is tested against, and the
fallback where the extension is not built (``NATIVE`` is False)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from .compression import decompress
from .errors import CorruptBatch
from .records import BATCH_HEADER_SIZE, BatchHeader

_native_decode: Callable[..., int] | None
try:
    from ._record_columns import decode as _native_decode
except ImportError:  # pragma: no cover - built without a C compiler: callers use records.decode_columns
    _native_decode = None

__all__ = ["NATIVE", "new_buffers", "decode_into_buffers", "OFFSET_BUFFERS"]

NATIVE = _native_decode is not None

# Offset buffers start with their first entry; see _record_columns.c for the order.
OFFSET_BUFFERS = frozenset({2, 5, 8, 9, 11})
_ZERO = struct.pack("<i", 0)


def new_buffers(with_headers: bool) -> list[bytearray]:
    count = 14 if with_headers else 8
    return [bytearray(_ZERO) if i in OFFSET_BUFFERS else bytearray() for i in range(count)]


def decode_into_buffers(data: bytes | memoryview, header: BatchHeader, start: int, end: int,
                        buffers: list[bytearray]) -> int:
    """Append the records of one batch with ``start <= offset < end``; returns how many."""
    assert _native_decode is not None, "the _record_columns extension is not built"
    payload = data[header.position + BATCH_HEADER_SIZE: header.position + header.size]
    if header.compression:
        payload = decompress(header.compression, payload)
    try:
        return _native_decode(payload, header.base_offset, header.base_timestamp, header.max_timestamp,
                              header.log_append_time, header.records_count, start, end, buffers)
    except ValueError as exc:
        raise CorruptBatch(str(exc)) from None
