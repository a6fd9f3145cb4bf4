"""KIP-890 for Produce: a transactional producer's first batch in a partition is appended
only if its transaction is ongoing and holds the partition, and no marker of that producer
was written to the partition while that was being checked. In transactions v2 (Produce
v12+) the first batch adds its partition to the transaction itself, under the producer's
current epoch: a late batch of a transaction already ended carries an older one and is
fenced."""

from __future__ import annotations

import logging

from kafscale.protocol.errors import CorruptBatch, ErrorCode, KafkaError
from kafscale.protocol.records import BATCH_HEADER_SIZE, BatchHeader, parse_batch_header
from kafscale.protocol.transactions import TxnState, TxnVersion

from ..context import RequestContext
from ..log import PartitionLog

__all__ = ["VerifiedBatch", "verify_transaction"]

log = logging.getLogger("kafscale.handlers.produce")


class VerifiedBatch:
    """A partition's check of a transactional request: its batches must be its producer's,
    and a first batch may be appended only while the guard it took is still there."""

    def __init__(self, producer_id: int, guard: object | None) -> None:
        self.producer_id = producer_id
        self.guard = guard
        self.refusal = KafkaError(ErrorCode.invalid_txn_state, "the transaction ended while the batch was checked")

    def holds(self, target: PartitionLog, headers: list[BatchHeader]) -> bool:
        if any(not h.is_transactional or h.producer_id != self.producer_id for h in headers):
            self.refusal = KafkaError(ErrorCode.invalid_record, "a transactional request's batches must all be "
                                      "transactional batches of its producer")
            return False
        # A batch of an already open transaction took no guard (None): only the open one counts.
        return target.has_open_transaction(self.producer_id) or (
            self.guard is not None and target.verification.holds(self.producer_id, self.guard))

    def done(self, target: PartitionLog) -> None:
        if self.guard is not None:
            target.verification.end(self.producer_id, self.guard)


async def verify_transaction(ctx: RequestContext, transactional_id: str, body, logs: dict,
                             version: TxnVersion) -> dict[tuple[str, int], VerifiedBatch | KafkaError]:
    """Each partition's check (one read, or in v2 one change, of the transaction's state for
    the whole request)."""
    checks: dict[tuple[str, int], VerifiedBatch | KafkaError] = {}
    first_batches = []
    for topic in body.topic_data:
        for part in topic.partition_data:
            key = (topic.name, part.index)
            target = logs[key]
            if isinstance(target, KafkaError) or len(part.records or b"") < BATCH_HEADER_SIZE:
                continue  # answered by the checks that follow
            try:
                header = parse_batch_header(part.records)
            except CorruptBatch:
                continue  # answered by validation
            if not header.is_transactional or header.is_control:
                checks[key] = KafkaError(ErrorCode.invalid_record, "a transactional request's batches must all be "
                                         "transactional batches of its producer")
                continue
            if target.has_open_transaction(header.producer_id) \
                    and target.producers.epoch_of(header.producer_id) in (None, header.producer_epoch):
                checks[key] = VerifiedBatch(header.producer_id, guard=None)
            else:  # (in v2, a newer epoch than the open transaction's is the next transaction)
                first_batches.append((key, target, header))
    if not first_batches:
        return checks

    def guard_first_batches() -> None:
        for key, target, header in first_batches:
            checks[key] = VerifiedBatch(header.producer_id, target.verification.begin(header.producer_id))

    if version is TxnVersion.V1:
        guard_first_batches()  # before the read: a marker written while it is awaited revokes them
    unavailable: KafkaError | None = None
    transaction = None
    try:
        if version is TxnVersion.V2:
            producers = {(h.producer_id, h.producer_epoch) for _, _, h in first_batches}
            if len(producers) == 1:  # (else: refused below, by the mismatch with the state read)
                [(producer_id, producer_epoch)] = producers
                transaction = await ctx.transactions.add_partitions(
                    transactional_id, producer_id, producer_epoch, [key for key, _, _ in first_batches])
        if transaction is None:
            transaction = await ctx.transactions.state(transactional_id)
    except KafkaError as exc:
        unavailable = _as_produce_error(exc)
    except Exception as exc:  # the metadata store is unreachable: nothing is appended unchecked
        log.warning("cannot check transaction %r: %s", transactional_id, exc)
        unavailable = KafkaError(ErrorCode.coordinator_not_available, f"transaction state unreadable: {exc}")
    if version is TxnVersion.V2:
        # After the add, which may have written the previous transaction's markers here: a
        # marker written from now on revokes the guards, and one written before carried a
        # newer epoch, which fences these batches at their append.
        guard_first_batches()
    for key, target, header in first_batches:
        if unavailable is not None:
            refusal = unavailable
        elif transaction is None or transaction.producer_id != header.producer_id:
            refusal = KafkaError(ErrorCode.invalid_producer_id_mapping,
                                 f"producer {header.producer_id} is not {transactional_id!r}'s")
        elif header.producer_epoch != transaction.producer_epoch:
            refusal = KafkaError(ErrorCode.invalid_producer_epoch,
                                 f"epoch {header.producer_epoch} is not the transaction's {transaction.producer_epoch}")
        elif transaction.state != TxnState.ONGOING or key not in transaction.partitions:
            refusal = KafkaError(ErrorCode.invalid_txn_state,
                                 f"{key[0]}-{key[1]} is not in an ongoing transaction of {transactional_id!r}")
        else:
            continue
        verified = checks[key]
        assert isinstance(verified, VerifiedBatch)  # first batches are the ones given a guard above
        verified.done(target)
        checks[key] = refusal
    return checks


def _as_produce_error(exc: KafkaError) -> KafkaError:
    """The coordinator's refusal of an implicit add, as Produce answers it: a fenced producer
    is INVALID_PRODUCER_EPOCH there (Kafka's produce has no PRODUCER_FENCED)."""
    if exc.code == ErrorCode.producer_fenced:
        return KafkaError(ErrorCode.invalid_producer_epoch, str(exc))
    return exc
