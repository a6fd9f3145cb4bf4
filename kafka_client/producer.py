"""An idempotent or transactional producer: records accumulate per partition into
batches, a full batch (or a full buffer) is sent at once and waited for, so memory is
bounded by ``buffer_bytes`` and a slow gateway slows the caller (backpressure).

Every batch carries the producer id, epoch and a sequence per partition, and a retry
resends the same bytes: the gateway drops the duplicate of a batch it already stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.compression import Compression
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.records import Record, RecordHeader, batch_of, build_batch

from .cluster import GROUP, TRANSACTION, Cluster, ClusterError, check
from .connection import BrokerConnection
from .partitioner import partition_for_key

__all__ = ["Producer", "ProducerIdentity", "end_transaction"]

_RECORD_OVERHEAD = 24  # a record's varints and attributes, for the size estimate


@dataclass(frozen=True)
class ProducerIdentity:
    producer_id: int
    epoch: int


@dataclass
class _Pending:
    """A partition's records waiting to be sent: encoded sections (each its own batch) first,
    then records one by one."""

    sections: list[tuple[bytes, int, int]] = field(default_factory=list)  # (records, count, timestamp)
    records: list[Record] = field(default_factory=list)
    size: int = 0


class Producer:
    def __init__(self, cluster: Cluster, *, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000, compression: Compression = Compression.NONE,
                 batch_bytes: int = 512 << 10, buffer_bytes: int = 32 << 20, delivery_timeout_s: float = 120.0) -> None:
        self._cluster = cluster
        self.transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self._compression = compression
        self._batch_bytes = batch_bytes
        self._buffer_bytes = buffer_bytes
        self._delivery_timeout_s = delivery_timeout_s
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._buffered = 0
        self._sequences: dict[tuple[str, int], int] = {}
        self._in_transaction: set[tuple[str, int]] = set()
        self._sticky: dict[str, int] = {}
        self.identity = self._init_producer_id()

    # -- identity and transactions -----------------------------------------------------------

    def _init_producer_id(self) -> ProducerIdentity:
        values = {"transactional_id": self.transactional_id, "transaction_timeout": self._transaction_timeout_ms,
                  "producer_id": -1, "producer_epoch": -1}

        def attempt() -> ProducerIdentity:
            connection = (self._cluster.coordinator(TRANSACTION, self.transactional_id)
                          if self.transactional_id is not None else self._cluster.any_broker())
            answer = self._cluster.call(connection, ApiKey.INIT_PRODUCER_ID, 4, values)
            check(answer.error_code, "InitProducerId")
            return ProducerIdentity(answer.producer_id, answer.producer_epoch)

        return self._cluster.retry(attempt, deadline_s=self._delivery_timeout_s, on_retry=self._forget_coordinator)

    def _coordinator(self) -> BrokerConnection:
        assert self.transactional_id is not None, "not a transactional producer"
        return self._cluster.coordinator(TRANSACTION, self.transactional_id)

    def _forget_coordinator(self) -> None:
        if self.transactional_id is not None:
            self._cluster.forget_coordinator(TRANSACTION, self.transactional_id)

    def _add_partitions(self, partitions: Sequence[tuple[str, int]]) -> None:
        new = [tp for tp in partitions if tp not in self._in_transaction]
        if not new or self.transactional_id is None:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)

        def attempt():
            answer = self._cluster.call(self._coordinator(), ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
                    "v3_and_below_transactional_id": self.transactional_id,
                    "v3_and_below_producer_id": self.identity.producer_id,
                    "v3_and_below_producer_epoch": self.identity.epoch,
                    "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
            for topic in answer.results_by_topic_v3_and_below:
                for result in topic.results_by_partition:
                    check(result.partition_error_code, f"AddPartitionsToTxn {topic.name}-{result.partition_index}")

        self._cluster.retry(attempt, deadline_s=self._delivery_timeout_s, on_retry=self._forget_coordinator)
        self._in_transaction.update(new)

    def add_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Make the group's ``offsets`` part of the transaction (AddOffsetsToTxn, TxnOffsetCommit)."""
        def add() -> None:
            answer = self._cluster.call(self._coordinator(), ApiKey.ADD_OFFSETS_TO_TXN, 3, {
                "transactional_id": self.transactional_id, "producer_id": self.identity.producer_id,
                "producer_epoch": self.identity.epoch, "group_id": group_id})
            check(answer.error_code, "AddOffsetsToTxn")

        self._cluster.retry(add, deadline_s=self._delivery_timeout_s, on_retry=self._forget_coordinator)
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": None})
        values = {"transactional_id": self.transactional_id, "group_id": group_id,
                  "producer_id": self.identity.producer_id, "producer_epoch": self.identity.epoch,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def attempt():
            connection = self._cluster.coordinator(GROUP, group_id)
            answer = self._cluster.call(connection, ApiKey.TXN_OFFSET_COMMIT, 3, values)
            for topic in answer.topics:
                for result in topic.partitions:
                    check(result.error_code, f"TxnOffsetCommit {group_id} {topic.name}-{result.partition_index}")

        self._cluster.retry(attempt, deadline_s=self._delivery_timeout_s,
                            on_retry=lambda: self._cluster.forget_coordinator(GROUP, group_id))

    def commit(self) -> None:
        """Flush, then commit the transaction (a task that ends its own transaction; the Spark
        sink's tasks leave that to the driver, :func:`end_transaction`)."""
        assert self.transactional_id is not None, "not a transactional producer"
        self.flush()
        end_transaction(self._cluster, self.transactional_id, self.identity, commit=True)
        self._in_transaction.clear()

    def abort(self) -> None:
        assert self.transactional_id is not None, "not a transactional producer"
        self._pending.clear()
        self._buffered = 0
        end_transaction(self._cluster, self.transactional_id, self.identity, commit=False)
        self._in_transaction.clear()

    # -- records ------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        return self._cluster.partition_count(topic)

    def next_sticky(self, topic: str) -> None:
        """The sticky partitioner moves on (as it does when a keyless batch fills)."""
        self._sticky.pop(topic, None)

    def partition_of(self, topic: str, key: bytes | None) -> int:
        count = self._cluster.partition_count(topic)
        if key is not None:
            return partition_for_key(key, count)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky >= count:
            sticky = self._sticky[topic] = random.randrange(count)
        return sticky

    def send(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int | None = None,
             headers: tuple[RecordHeader, ...] = (), timestamp_ms: int | None = None) -> None:
        if partition is None:
            partition = self.partition_of(topic, key)
        elif not 0 <= partition < self._cluster.partition_count(topic):
            raise ClusterError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r} has no partition {partition}")
        where = (topic, partition)
        pending = self._pending.get(where)
        if pending is None:
            pending = self._pending[where] = _Pending()
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        pending.records.append(Record(len(pending.records), stamp, key, value, headers))
        size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0) \
            + sum(len(h.key) + len(h.value or b"") + 4 for h in headers)
        pending.size += size
        self._buffered += size
        if pending.size >= self._batch_bytes:
            self._send([where])
            if key is None and partition == self._sticky.get(topic):
                self._sticky.pop(topic)  # the sticky partitioner moves on once a batch is full
        elif self._buffered >= self._buffer_bytes:
            self.flush()

    def send_encoded(self, topic: str, partition: int, records_section: bytes, count: int,
                     timestamp_ms: int | None = None) -> None:
        """Records already encoded (offset deltas from 0, one timestamp; by
        ``protocol.column_encoding``), sent as one batch of their own."""
        where = (topic, partition)
        pending = self._pending.get(where)
        if pending is None:
            pending = self._pending[where] = _Pending()
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        pending.sections.append((records_section, count, stamp))
        pending.size += len(records_section)
        self._buffered += len(records_section)
        if pending.size >= self._batch_bytes:
            self._send([where])
        elif self._buffered >= self._buffer_bytes:
            self.flush()

    def flush(self) -> None:
        """Send everything buffered and wait until the gateways stored it."""
        if self._pending:
            self._send(list(self._pending))

    def _send(self, partitions: list[tuple[str, int]]) -> None:
        self._add_partitions(partitions)
        unsent: dict[tuple[str, int], tuple[bytes, int]] = {}
        for where in partitions:
            pending = self._pending.pop(where)
            self._buffered -= pending.size
            unsent[where] = self._record_set(pending, self._sequences.get(where, 0))

        def attempt() -> None:
            by_leader: dict[int, tuple[BrokerConnection, list[tuple[str, int]]]] = {}
            for where in unsent:
                leader = self._cluster.leader(*where)
                by_leader.setdefault(id(leader), (leader, []))[1].append(where)
            failure: ClusterError | None = None
            for connection, group in by_leader.values():
                topics: dict[str, list[dict]] = {}
                for topic, partition in group:
                    topics.setdefault(topic, []).append({"index": partition, "records": unsent[(topic, partition)][0]})
                answer = self._cluster.call(connection, ApiKey.PRODUCE, 9, {
                    "transactional_id": self.transactional_id, "acks": -1, "timeout": 30_000,
                    "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]})
                for topic_answer in answer.responses:
                    for result in topic_answer.partition_responses:
                        where = (topic_answer.name, result.index)
                        if result.error_code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                            count = unsent.pop(where)[1]
                            self._sequences[where] = (self._sequences.get(where, 0) + count) & 0x7FFFFFFF
                        else:
                            failure = failure or ClusterError(result.error_code, f"Produce {where[0]}-{where[1]}")
                            self._cluster.forget_leader(*where)
            if failure is not None:
                raise failure

        self._cluster.retry(attempt, deadline_s=self._delivery_timeout_s)

    def _record_set(self, pending: _Pending, sequence: int) -> tuple[bytes, int]:
        """The partition's batches, with consecutive sequences from ``sequence``, and their
        record count."""
        producer_id, epoch = self.identity.producer_id, self.identity.epoch
        transactional = self.transactional_id is not None
        batches, count = [], 0
        for section, records, stamp in pending.sections:
            batches.append(batch_of(section, records, records - 1, stamp, stamp, compression=self._compression,
                                    producer_id=producer_id, producer_epoch=epoch, transactional=transactional,
                                    base_sequence=(sequence + count) & 0x7FFFFFFF))
            count += records
        if pending.records:
            batches.append(build_batch(pending.records, compression=self._compression, producer_id=producer_id,
                                       producer_epoch=epoch, transactional=transactional,
                                       base_sequence=(sequence + count) & 0x7FFFFFFF))
            count += len(pending.records)
        return b"".join(batches), count


def end_transaction(cluster: Cluster, transactional_id: str, identity: ProducerIdentity, *, commit: bool,
                    deadline_s: float = 120.0) -> None:
    """EndTxn for a producer identity, from any process (the Spark driver commits what its
    tasks wrote). A retry of an EndTxn already done is answered as it was."""

    def attempt() -> None:
        answer = cluster.call(cluster.coordinator(TRANSACTION, transactional_id), ApiKey.END_TXN, 3, {
            "transactional_id": transactional_id, "producer_id": identity.producer_id,
            "producer_epoch": identity.epoch, "committed": commit})
        check(answer.error_code, f"EndTxn {transactional_id!r} ({'commit' if commit else 'abort'})")

    cluster.retry(attempt, deadline_s=deadline_s,
                  on_retry=lambda: cluster.forget_coordinator(TRANSACTION, transactional_id))
