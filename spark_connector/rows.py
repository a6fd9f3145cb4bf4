"""Executor side: the records of one partition range as Arrow record batches whose schema
is exactly what Spark expects for the Kafka source's columns.

Records are decoded straight into Arrow buffers by the C decoder
(:mod:`kafscale.protocol.column_buffers`); where it is not built, into Python lists by
:func:`kafscale.protocol.records.decode_columns` (the reference the C decoder is tested
against), then converted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kafscale.protocol import column_buffers
from kafscale.protocol.errors import CorruptBatch
from kafscale.protocol.records import BatchHeader, decode_columns
from kafscale.protocol.transactions import AbortedBatches
from kafscale.storage_backends import ObjectStore

from .planning import PartitionRange
from .stored_log import CorruptSegmentError, load_piece

__all__ = ["arrow_schema", "SPARK_SCHEMA", "HEADERS_DDL", "read_range"]

SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"
_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADER_TYPE = pa.list_(_HEADER_STRUCT)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ROWS_PER_BATCH = 65_536
# Arrow binary columns address their bytes with int32: flush well before 2 GiB (a single
# batch decompresses to at most 1 GiB).
_BYTES_PER_BATCH = 256 << 20


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP), pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


class _Columns:
    """The rows decoded so far, turned into a record batch by :meth:`flush`."""

    def __init__(self, part: PartitionRange, include_headers: bool) -> None:
        self._part = part
        self._schema = arrow_schema(include_headers)
        self._include_headers = include_headers
        self._timestamp_types: list[pa.Array] = []
        self.rows = 0

    def add(self, data: bytes | memoryview, batch: BatchHeader, start: int, end: int) -> None:
        added = self._decode(data, batch, start, end)
        if added:
            self.rows += added
            self._timestamp_types.append(pa.repeat(pa.scalar(1 if batch.log_append_time else 0, pa.int32()), added))

    def full(self) -> bool:
        return self.rows >= _ROWS_PER_BATCH or self._bytes() >= _BYTES_PER_BATCH

    def flush(self) -> pa.RecordBatch:
        count = self.rows
        key, value, offsets, stamps, headers = self._take()
        arrays = [key, value, pa.repeat(pa.scalar(self._part.topic, pa.string()), count),
                  pa.repeat(pa.scalar(self._part.partition, pa.int32()), count), offsets, stamps,
                  pa.concat_arrays(self._timestamp_types)]
        if headers is not None:
            arrays.append(headers)
        self._timestamp_types = []
        self.rows = 0
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def _decode(self, data, batch: BatchHeader, start: int, end: int) -> int:
        raise NotImplementedError

    def _bytes(self) -> int:
        raise NotImplementedError

    def _take(self) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array | None]:
        raise NotImplementedError


class _NativeColumns(_Columns):
    def __init__(self, part: PartitionRange, include_headers: bool) -> None:
        super().__init__(part, include_headers)
        self._buffers = column_buffers.new_buffers(include_headers)

    def _decode(self, data, batch: BatchHeader, start: int, end: int) -> int:
        return column_buffers.decode_into_buffers(data, batch, start, end, self._buffers)

    def _bytes(self) -> int:
        return len(self._buffers[3]) + len(self._buffers[6]) + (len(self._buffers[12]) if self._include_headers else 0)

    def _take(self):
        count = self.rows
        buffers = [pa.py_buffer(b) for b in self._buffers]  # zero-copy: the bytearrays are not touched again
        self._buffers = column_buffers.new_buffers(self._include_headers)
        key = pa.Array.from_buffers(pa.binary(), count, [buffers[4], buffers[2], buffers[3]])
        value = pa.Array.from_buffers(pa.binary(), count, [buffers[7], buffers[5], buffers[6]])
        offsets = pa.Array.from_buffers(pa.int64(), count, [None, buffers[0]])
        stamps = pa.Array.from_buffers(_TIMESTAMP, count, [None, buffers[1]])
        headers = None
        if self._include_headers:
            header_count = len(buffers[11]) // 4 - 1
            header_keys = pa.Array.from_buffers(pa.string(), header_count, [None, buffers[9], buffers[10]])
            header_values = pa.Array.from_buffers(pa.binary(), header_count, [buffers[13], buffers[11], buffers[12]])
            pairs = pa.StructArray.from_arrays([header_keys, header_values], fields=list(_HEADER_STRUCT))
            lists = pa.Array.from_buffers(pa.int32(), count + 1, [None, buffers[8]])
            headers = pa.ListArray.from_arrays(lists, pairs, type=_HEADER_TYPE)
        return key, value, offsets, stamps, headers


class _ListColumns(_Columns):
    def __init__(self, part: PartitionRange, include_headers: bool) -> None:
        super().__init__(part, include_headers)
        self._lists: tuple[list, list, list, list, list | None] = ([], [], [], [], [] if include_headers else None)
        self._size = 0

    def _decode(self, data, batch: BatchHeader, start: int, end: int) -> int:
        before = len(self._lists[0])
        decode_columns(data, batch, start, end, self._lists)
        self._size += batch.batch_length
        return len(self._lists[0]) - before

    def _bytes(self) -> int:
        return self._size

    def _take(self):
        offsets, timestamps, keys, values, headers = self._lists
        stamps = pa.array([t * 1000 for t in timestamps], pa.int64()).cast(_TIMESTAMP)
        arrays = (pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(offsets, pa.int64()), stamps,
                  None if headers is None else pa.array(
                      [[{"key": h.key, "value": h.value} for h in record] for record in headers], _HEADER_TYPE))
        self._lists = ([], [], [], [], [] if self._include_headers else None)
        self._size = 0
        return arrays


def read_range(store: ObjectStore, part: PartitionRange, include_headers: bool, *,
               native: bool = column_buffers.NATIVE) -> Iterator[pa.RecordBatch]:
    columns = (_NativeColumns if native else _ListColumns)(part, include_headers)
    aborted = AbortedBatches(part.aborted)
    position = part.start  # pieces may overlap (an entry compacted but not yet deleted)
    for piece in part.pieces:
        for data, batches in load_piece(store, piece, position, part.end):
            for batch in batches:
                if batch.last_offset < position or batch.base_offset >= part.end:
                    continue
                if not batch.is_control and batch not in aborted:
                    try:
                        columns.add(data, batch, position, part.end)
                    except CorruptBatch as exc:
                        raise CorruptSegmentError(f"{piece.key}: batch at offset {batch.base_offset}: {exc}") from exc
                position = batch.last_offset + 1
                if columns.full():
                    yield columns.flush()
    if columns.rows:
        yield columns.flush()
