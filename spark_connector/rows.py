"""Executor side: the records of one partition range as Arrow record batches whose schema
is exactly what Spark expects for the Kafka source's columns."""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.records import iter_records
from kafscale.protocol.segment import read_segment
from kafscale.storage_backends import ObjectNotFound, ObjectStore

from .planning import DataLossError, PartitionRange

__all__ = ["arrow_schema", "SPARK_SCHEMA", "read_range", "CorruptSegmentError"]

SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"
_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_ROWS_PER_BATCH = 65_536


class CorruptSegmentError(RuntimeError):
    """A segment object failed validation; nothing from it is returned."""


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
    columns: dict[str, list] = {name: [] for name in schema.names}

    def flush() -> pa.RecordBatch:
        count = len(columns["offset"])
        arrays = [
            pa.array(columns["key"], pa.binary()), pa.array(columns["value"], pa.binary()),
            pa.array([part.topic] * count, pa.string()), pa.array([part.partition] * count, pa.int32()),
            pa.array(columns["offset"], pa.int64()),
            pa.array([ms * 1000 for ms in columns["timestamp"]], pa.timestamp("us", tz="UTC")),
            pa.array(columns["timestampType"], pa.int32()),
        ]
        if include_headers:
            arrays.append(pa.array(columns["headers"], _HEADER_TYPE))
        for values in columns.values():
            values.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for span in part.segments:
        try:
            segment = read_segment(store.get(span.key))
        except ObjectNotFound:
            raise DataLossError(f"{span.key} was deleted after planning (retention?)") from None
        except SegmentFormatError as exc:
            raise CorruptSegmentError(f"segment {span.key} is corrupt: {exc}") from exc
        for batch in segment.batches:
            if batch.last_offset < part.start or batch.base_offset >= part.end or batch.is_control:
                continue
            log_append = 1 if batch.log_append_time else 0
            for record in iter_records(segment.data, batch):
                if not part.start <= record.offset < part.end:
                    continue
                columns["key"].append(record.key)
                columns["value"].append(record.value)
                columns["offset"].append(record.offset)
                columns["timestamp"].append(record.timestamp)
                columns["timestampType"].append(log_append)
                if include_headers:
                    columns["headers"].append([{"key": h.key, "value": h.value} for h in record.headers])
                if len(columns["offset"]) >= _ROWS_PER_BATCH:
                    yield flush()
    if columns["offset"]:
        yield flush()
