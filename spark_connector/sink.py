"""``df.write.format("kafscale")`` and ``writeStream.format("kafscale")``: rows produced
through the gateways with the Kafka protocol (so ownership, fencing, ACLs and idempotence
hold), with the columns of Spark's Kafka sink: ``value`` (required), ``key``, ``topic``,
``partition``, ``headers``; other columns are ignored, as there.

At least once (the default, as Spark's Kafka sink): each task produces with an idempotent
producer and flushes before it reports success; a retried task writes its rows again.

Exactly once (``delivery=exactly_once``): task ``p`` writes in a transaction with the id
``{transactionalIdPrefix}-{p}``; starting it fences every earlier attempt of that task
(their open transactions are aborted). The task leaves its transaction open and reports
its producer id and epoch; the driver's commit ends every task's transaction (EndTxn),
its abort aborts them. A stream also commits, inside each task's transaction, the batch
id to the group ``{transactionalIdPrefix}.batches`` (partition ``p`` of the pseudo topic
:data:`BATCH_TOPIC`), so a micro-batch Spark runs again after a restart (its commit was
not recorded in the checkpoint) skips the tasks whose transaction was already committed.
That needs what every idempotent sink needs: a replayed micro-batch puts the same rows in
the same task (true of a replayable source such as ``format("kafscale")`` and of
deterministic transformations).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from kafscale.kafka_client import Cluster, ClusterError
from kafscale.kafka_client.groups import committed_offsets
from kafscale.kafka_client.producer import Producer, ProducerIdentity, end_transaction
from kafscale.protocol import column_encoding
from kafscale.protocol.column_encoding import Column
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.records import RecordHeader

from .options import OptionError
from .write_options import WriteOptions

__all__ = ["KafscaleBatchWriter", "KafscaleStreamWriter", "check_columns", "BATCH_TOPIC"]

log = logging.getLogger(__name__)

BATCH_TOPIC = "_kafscale_spark_batch"  # the exactly-once stream's per-task batch marks (never produced to)
_BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local property of a micro-batch's tasks


def check_columns(schema: StructType, options: WriteOptions) -> None:
    """Refuse, before any task runs, what Spark's Kafka sink refuses."""
    types = {field.name.lower(): field.dataType for field in schema.fields}
    text_or_bytes = (StringType, BinaryType)
    if "value" not in types:
        raise OptionError("writing format kafscale needs a value column (string or binary)")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], text_or_bytes):
            raise OptionError(f"column {name} must be string or binary, not {types[name].simpleString()}")
    if options.topic is None and "topic" not in types:
        raise OptionError("give the topic option or a topic column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"column topic must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], (IntegerType, LongType)):
        raise OptionError(f"column partition must be int, not {types['partition'].simpleString()}")
    if "headers" in types and types["headers"].simpleString() not in (
            "array<struct<key:string,value:binary>>",):
        raise OptionError("column headers must be array<struct<key: string, value: binary>>")


@dataclass
class TaskWritten(WriterCommitMessage):
    rows: int
    transactional_id: str | None = None  # exactly once: the open transaction the driver ends
    identity: ProducerIdentity | None = None
    skipped: bool = False  # exactly once: this task's rows of the batch were committed before


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


def _produce(producer: Producer, batch: pa.RecordBatch, topic_option: str | None, batch_bytes: int) -> int:
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


def _producer(cluster: Cluster, options: WriteOptions, transactional_id: str | None) -> Producer:
    return Producer(cluster, transactional_id=transactional_id, transaction_timeout_ms=options.transaction_timeout_ms,
                    compression=options.compression, batch_bytes=options.batch_bytes,
                    buffer_bytes=options.buffer_bytes, delivery_timeout_s=options.delivery_timeout_s)


def _write(options: WriteOptions, batches: Iterator[pa.RecordBatch], batch_id: int | None) -> TaskWritten:
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    with options.client.cluster() as cluster:
        if not options.exactly_once:
            producer = _producer(cluster, options, None)
            rows = sum(_produce(producer, batch, options.topic, options.batch_bytes) for batch in batches)
            producer.flush()
            return TaskWritten(rows)
        transactional_id = f"{options.transactional_id_prefix}-{task}"
        producer = _producer(cluster, options, transactional_id)  # fences earlier attempts, aborts their writes
        group = f"{options.transactional_id_prefix}.batches"
        if batch_id is not None:
            done = committed_offsets(cluster, group, [(BATCH_TOPIC, task)]).get((BATCH_TOPIC, task), 0)
            if done > batch_id:
                for _ in batches:
                    pass
                return TaskWritten(0, skipped=True)
        rows = sum(_produce(producer, batch, options.topic, options.batch_bytes) for batch in batches)
        producer.flush()
        if batch_id is not None:
            producer.add_offsets(group, {(BATCH_TOPIC, task): batch_id + 1})
        return TaskWritten(rows, transactional_id, producer.identity)


def _end_all(options: WriteOptions, messages: list, commit: bool) -> None:
    open_transactions = [m for m in messages if isinstance(m, TaskWritten) and m.identity is not None]
    if not open_transactions:
        return
    with options.client.cluster() as cluster:
        failures = []
        for message in open_transactions:
            assert message.transactional_id is not None and message.identity is not None
            try:
                end_transaction(cluster, message.transactional_id, message.identity, commit=commit,
                                deadline_s=options.delivery_timeout_s)
            except Exception as exc:  # end the others all the same
                failures.append(f"{message.transactional_id}: {exc}")
        if failures and commit:
            raise RuntimeError("the sink could not commit every task's transaction (the ones listed stay "
                               "uncommitted; a restarted query writes them again): " + "; ".join(failures))
        for failure in failures:
            log.warning("aborting %s failed (the gateway aborts it when it times out)", failure)


class KafscaleBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWritten:
        return _write(self.options, iterator, None)

    def commit(self, messages) -> None:
        _end_all(self.options, messages, commit=True)

    def abort(self, messages) -> None:
        _end_all(self.options, messages, commit=False)


class KafscaleStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWritten:
        context = TaskContext.get()
        batch_id = context.getLocalProperty(_BATCH_ID_PROPERTY) if context is not None else None
        if self.options.exactly_once and batch_id is None:
            raise RuntimeError(f"Spark did not give the micro-batch id ({_BATCH_ID_PROPERTY}) to the task: "
                               "exactly once cannot tell a replayed micro-batch")
        return _write(self.options, iterator, int(batch_id) if batch_id is not None else None)

    def commit(self, messages, batchId: int) -> None:
        _end_all(self.options, messages, commit=True)

    def abort(self, messages, batchId: int) -> None:
        _end_all(self.options, messages, commit=False)
