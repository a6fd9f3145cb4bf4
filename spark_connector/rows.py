"""Executor side: the records of one partition range as Arrow record batches whose schema
is exactly what Spark expects for the Kafka source's columns."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kafscale.protocol.errors import CorruptBatch
from kafscale.protocol.records import decode_columns
from kafscale.protocol.transactions import AbortedBatches
from kafscale.storage_backends import ObjectStore

from .planning import PartitionRange
from .stored_log import CorruptSegmentError, load_piece

__all__ = ["arrow_schema", "SPARK_SCHEMA", "HEADERS_DDL", "read_range"]

SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"
_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_ROWS_PER_BATCH = 65_536


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


def read_range(store: ObjectStore, part: PartitionRange, include_headers: bool) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(include_headers)
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list = []
    values: list = []
    headers: list | None = [] if include_headers else None
    columns = (offsets, timestamps, keys, values, headers)
    timestamp_types: list[pa.Array] = []

    def flush() -> pa.RecordBatch:
        count = len(offsets)
        stamps = pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
        arrays = [
            pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
            pa.array([part.topic] * count, pa.string()),
            pa.array([part.partition] * count, pa.int32()), pa.array(offsets, pa.int64()), stamps,
            pa.concat_arrays(timestamp_types) if timestamp_types else pa.array([], pa.int32()),
        ]
        if headers is not None:
            arrays.append(pa.array(
                [[{"key": h.key, "value": h.value} for h in record] for record in headers], _HEADER_TYPE))
        for column in columns:
            if column is not None:
                column.clear()
        timestamp_types.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    aborted = AbortedBatches(part.aborted)
    position = part.start  # pieces may overlap (an entry compacted but not yet deleted)
    for piece in part.pieces:
        for data, batches in load_piece(store, piece):
            for batch in batches:
                if batch.last_offset < position or batch.base_offset >= part.end:
                    continue
                if not batch.is_control and batch not in aborted:
                    before = len(offsets)
                    try:
                        decode_columns(data, batch, position, part.end, columns)
                    except CorruptBatch as exc:
                        raise CorruptSegmentError(f"{piece.key}: batch at offset {batch.base_offset}: {exc}") from exc
                    added = len(offsets) - before
                    if added:
                        timestamp_types.append(pa.array([1 if batch.log_append_time else 0] * added, pa.int32()))
                position = batch.last_offset + 1
                if len(offsets) >= _ROWS_PER_BATCH:
                    yield flush()
    if offsets:
        yield flush()
