"""Loading a partition: its segments and log-object entries, into one view.

The one reader of the stored log (:mod:`kafscale.protocol.stored_log`, as Spark reads
it), plus what only the owner does: torn segments are repaired (their intact
batches kept), and idempotent-producer state and open transactions are rebuilt from
the stored transaction state and the newest batches.
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import KafkaError
from kafscale.protocol.layout import transaction_state_key
from kafscale.protocol.log_view import StoredSegment
from kafscale.protocol.transactions import PartitionTransactions
from kafscale.storage_backends import ObjectNotFound

from .log_objects import LogObjects
from .partition_log import FlushTicket, PartitionLog
from .producers import ProducerStates
from .segments import repair_torn
from .stored_log import read_stored

__all__ = ["recover"]

log = logging.getLogger("kafscale.recovery")


async def recover(partition_log: PartitionLog, objects: LogObjects, persisted_log_start: int = 0) -> None:
    """Rebuild the partition's pieces, log start, high watermark and producer state."""
    entries = objects.entries_for(partition_log.topic, partition_log.partition, partition_log.topic_id)
    store, damage = partition_log.store, partition_log.damage

    async def repair(torn: list[tuple[int, str]]) -> list[StoredSegment]:
        return await repair_torn(store, torn, damage, partition_log.clock.now_ms())

    view = await read_stored(store, reads.snapshot(partition_log.prefix, entries, persisted_log_start), repair)
    if view.holes:
        # Still after several listings: a log object whose directory is unreadable. Those
        # offsets answer CORRUPT_MESSAGE.
        damage.record(partition_log.prefix, f"offsets {list(view.holes)} are in no readable piece")
    partition_log.apply_view(view, ProducerStates())
    transactions, version, readable = await _stored_transactions(partition_log)
    if not readable:
        # Kafka's transaction index is derived data, rebuilt from every batch on recovery: the
        # newest batches alone would forget older aborted transactions, and read_committed
        # consumers would be served their records as committed. Requests of the partition
        # wait for its load meanwhile; /readyz and the metrics say it is running.
        damage.rebuilding.add(partition_log.prefix)
        try:
            transactions = await _transactions_from_whole_log(partition_log)
        finally:
            damage.rebuilding.discard(partition_log.prefix)
    stored = (dict(transactions.open), len(transactions.aborted))
    partition_log.restore_producers(await _replay_newest(partition_log, transactions))
    partition_log.book.restore(transactions, version,
                                       changed=(transactions.open, len(transactions.aborted)) != stored)
    try:
        # A transaction begun or ended in the batches after the stored state (a gateway killed
        # between a batch and storing the state): stored now, so readers of the store (Spark)
        # know it too.
        await partition_log.book.persist()
    except KafkaError as exc:
        log.warning("storing the transaction state of %s failed (retried on the next change): %s",
                    partition_log.prefix, exc)


async def _stored_transactions(partition_log: PartitionLog) -> tuple[PartitionTransactions, str | None, bool]:
    """The partition's stored transaction state, its version (none stored: empty), and
    whether it was readable."""
    key = transaction_state_key(partition_log.settings.namespace, partition_log.topic, partition_log.partition)
    try:
        raw, version = await partition_log.store.get_versioned(key)
    except ObjectNotFound:
        return PartitionTransactions(), None, True
    try:
        return PartitionTransactions.decode(raw), version, True
    except ValueError as exc:
        # Rebuilt from the whole log; the owner's next write replaces it.
        partition_log.damage.record(key, f"unreadable transaction state ({exc}); rebuilt from the whole log")
        return PartitionTransactions(), version, False


async def _transactions_from_whole_log(partition_log: PartitionLog) -> PartitionTransactions:
    """The transaction state of every batch from the log start: open transactions and the
    spans of aborted ones, as the stored state would have them."""
    rebuilt = PartitionTransactions(end=partition_log.log_start_offset)
    recorded_until = partition_log.log_start_offset  # pieces may overlap (compacted, not yet deleted)
    for piece in list(partition_log.pieces):
        if piece.last_offset < recorded_until:
            continue
        try:
            loaded = await partition_log.load_piece(piece, keep=False)
        except KafkaError as exc:  # damaged: its offsets answer CORRUPT_MESSAGE, whatever they held
            log.warning("rebuilding the transactions of %s: %s unreadable: %s", partition_log.prefix, piece.key, exc)
            continue
        for header in loaded.batches:
            if header.last_offset < recorded_until:
                continue
            recorded_until = header.last_offset + 1
            if header.is_transactional:
                try:
                    rebuilt.appended(header, loaded.batch_bytes(header))
                except ValueError as exc:  # a control batch that is no marker: nothing it ends
                    partition_log.damage.record(piece.key, f"offset {header.base_offset}: {exc}")
        await trio.lowlevel.checkpoint()
    rebuilt.end = max(rebuilt.end, recorded_until)
    log.warning("%s: transaction state rebuilt from the whole log (%d aborted transactions, %d open)",
                partition_log.prefix, len(rebuilt.aborted), len(rebuilt.open))
    return rebuilt


async def _replay_newest(partition_log: PartitionLog, transactions: PartitionTransactions) -> ProducerStates:
    """Idempotent producers' recent sequences, from the batches of the newest pieces: a
    batch retried after a restart or an ownership move is then recognised as a duplicate
    and answered with its stored offset instead of being written again. Batches past the
    stored transaction state's end update it (transactions begun or ended since)."""
    newest = []
    scanned = 0
    for piece in reversed(partition_log.pieces):
        if scanned >= partition_log.settings.producer_scan_bytes:
            break
        newest.append(piece)
        scanned += piece.size
    states: ProducerStates[FlushTicket] = ProducerStates()
    stored = FlushTicket()
    stored.finish()
    recorded_until = 0  # pieces may overlap (an entry compacted but not yet deleted)
    for piece in reversed(newest):
        try:
            loaded = await partition_log.load_piece(piece)
        except KafkaError as exc:  # unreadable: those producers are unknown, as before
            log.warning("cannot rebuild producer state from %s: %s", piece.key, exc)
            continue
        for header in loaded.batches:
            if header.last_offset >= recorded_until:
                states.record(header, stored)
                recorded_until = header.last_offset + 1
                if header.base_offset >= transactions.end and header.is_transactional:
                    try:
                        transactions.appended(header, loaded.batch_bytes(header))
                    except ValueError as exc:  # a control batch that is no marker: nothing it ends
                        partition_log.damage.record(piece.key, f"offset {header.base_offset}: {exc}")
    transactions.end = max(transactions.end, partition_log.high_watermark)
    return states
