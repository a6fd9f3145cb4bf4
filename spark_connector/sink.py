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

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from kafscale.kafka_client import Cluster
from kafscale.kafka_client.groups import committed_offsets
from kafscale.kafka_client.producer import Producer, ProducerIdentity, end_transaction

from .options import OptionError
from .producing import produce_batch
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
    if "headers" in types and types["headers"].simpleString() != "array<struct<key:string,value:binary>>":
        raise OptionError("column headers must be array<struct<key: string, value: binary>>")


@dataclass
class TaskWritten(WriterCommitMessage):
    rows: int
    transactional_id: str | None = None  # exactly once: the open transaction the driver ends
    identity: ProducerIdentity | None = None
    skipped: bool = False  # exactly once: this task's rows of the batch were committed before


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
            rows = sum(produce_batch(producer, batch, options.topic, options.batch_bytes) for batch in batches)
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
        rows = sum(produce_batch(producer, batch, options.topic, options.batch_bytes) for batch in batches)
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
