"""An Arrow batch of the sink's rows given to a producer: rows without headers bound for one
topic are partitioned (Kafka's murmur2 in C, explicit partitions, sticky for keyless rows)
and encoded in C a partition at a time (``protocol.column_encoding``), in sections that
stay under the batch size; other rows go one by one through the producer's Python encoder
(the reference)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafscale.kafka_client import ClusterError
from kafscale.kafka_client.producer import Producer
from kafscale.protocol import column_encoding
from kafscale.protocol.column_encoding import Column
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.records import RecordHeader

from .errors import OptionError

__all__ = ["produce_batch"]


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())  # zero-copy: the UTF-8 bytes Kafka carries
    return column.to_pylist()


def _binary(batch: pa.RecordBatch, name: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.binary())
    column = batch.column(index)
    return column if pa.types.is_binary(column.type) else column.cast(pa.binary())  # UTF-8 bytes, no copy


def _buffers(column: pa.Array) -> Column:
    validity, offsets, data = column.buffers()
    return validity, offsets, data if data is not None else b"", column.offset


def _single_topic(batch: pa.RecordBatch, topic_option: str | None) -> str | None:
    if topic_option is not None:
        return topic_option
    topics = batch.column(batch.schema.get_field_index("topic"))
    if topics.null_count:
        return None
    unique = pc.unique(topics)
    return unique[0].as_py() if len(unique) == 1 else None


def produce_batch(producer: Producer, batch: pa.RecordBatch, topic_option: str | None, batch_bytes: int) -> int:
    """Produce a batch's rows: encoded in C a partition's rows at a time where the extension is
    built and no row has headers and one topic takes them all; else row by row."""
    has_headers = batch.schema.get_field_index("headers") >= 0 and \
        batch.column(batch.schema.get_field_index("headers")).null_count < batch.num_rows
    topic = _single_topic(batch, topic_option) if column_encoding.NATIVE and not has_headers else None
    if topic is None:
        return _produce_rows(producer, batch, topic_option)
    count = batch.num_rows
    keys, values = _binary(batch, "key"), _binary(batch, "value")
    partition_count = producer.partition_count(topic)
    chosen = np.frombuffer(column_encoding.key_partitions(_buffers(keys), count, partition_count), np.int32).copy()
    index = batch.schema.get_field_index("partition")
    if index >= 0:
        given = batch.column(index)
        explicit = ~np.asarray(given.is_null().to_numpy(zero_copy_only=False))
        numbers = np.asarray(given.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
        if explicit.any() and (numbers[explicit].min() < 0 or numbers[explicit].max() >= partition_count):
            raise ClusterError(ErrorCode.unknown_topic_or_partition,
                               f"topic {topic!r} has partitions 0..{partition_count - 1} only")
        chosen[explicit] = numbers[explicit]
    keyless = chosen < 0
    if keyless.any():  # the sticky partitioner: one partition for this batch's keyless rows, then the next
        chosen[keyless] = producer.partition_of(topic, None)
        producer.next_sticky(topic)
    order = np.argsort(chosen, kind="stable")
    bounds = np.searchsorted(chosen[order], np.arange(partition_count + 1))
    for partition in range(partition_count):
        low, high = int(bounds[partition]), int(bounds[partition + 1])
        if low == high:
            continue
        if high - low == count:
            part_keys, part_values = keys, values
        else:
            rows = pa.array(order[low:high])
            part_keys, part_values = keys.take(rows), values.take(rows)
        key_buffers, value_buffers = _buffers(part_keys), _buffers(part_values)
        for start, stop in _sections(part_keys, part_values, batch_bytes):
            producer.send_encoded(topic, partition, column_encoding.encode_rows(key_buffers, value_buffers, start, stop),
                                  stop - start)
    return count


def _sections(keys: pa.Array, values: pa.Array, batch_bytes: int) -> Iterator[tuple[int, int]]:
    """Row ranges whose records take at most ``batch_bytes`` (a row larger than that alone)."""
    count = len(values)

    def ends(column: pa.Array) -> np.ndarray:  # bytes of the column's rows up to and including each
        offsets = np.frombuffer(column.buffers()[1], np.int32, count=count + 1, offset=4 * column.offset)
        return offsets[1:] - offsets[0]

    total = ends(keys) + ends(values) + 16 * np.arange(1, count + 1)  # and each record's varints
    start = 0
    while start < count:
        before = int(total[start - 1]) if start else 0
        stop = max(int(np.searchsorted(total, before + batch_bytes, side="right")), start + 1)
        yield start, stop
        start = stop


def _produce_rows(producer: Producer, batch: pa.RecordBatch, topic_option: str | None) -> int:
    count = batch.num_rows
    values = _column(batch, "value")
    assert values is not None  # check_columns
    keys = _column(batch, "key") or [None] * count
    topics = [topic_option] * count if topic_option is not None else _column(batch, "topic")
    assert topics is not None
    partitions = _column(batch, "partition") or [None] * count
    headers = _column(batch, "headers") or [None] * count
    for key, value, topic, partition, record_headers in zip(keys, values, topics, partitions, headers, strict=True):
        if topic is None:
            raise OptionError("null topic present in the data: give the topic option or a topic in every row")
        pairs = tuple(RecordHeader(h["key"], h["value"]) for h in record_headers) if record_headers else ()
        producer.send(topic.decode() if isinstance(topic, bytes) else topic, key, value, partition=partition,
                      headers=pairs)
    return count
