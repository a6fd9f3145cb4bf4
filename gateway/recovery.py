"""Loading a partition: its segments and log-object entries, into one view.

The one reader of the stored log (:mod:`kafscale.protocol.stored_log`, as Spark reads
it), plus what only the owner does: torn segments are repaired (their intact
batches kept), and idempotent-producer state is rebuilt from the newest batches.
"""

from __future__ import annotations

import logging

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import KafkaError
from kafscale.protocol.log_view import StoredSegment

from . import stored_log
from .log_objects import LogObjects
from .partition_log import FlushTicket, PartitionLog
from .producers import ProducerStates
from .segments import repair_torn

__all__ = ["recover"]

log = logging.getLogger("kafscale.recovery")


async def recover(partition_log: PartitionLog, objects: LogObjects, persisted_log_start: int = 0) -> None:
    """Rebuild the partition's pieces, log start, high watermark and producer state."""
    entries = objects.entries_for(partition_log.topic, partition_log.partition, partition_log.topic_id)
    store, damage = partition_log.store, partition_log.damage

    async def repair(torn: list[tuple[int, str]]) -> list[StoredSegment]:
        return await repair_torn(store, torn, damage)

    view = await stored_log.read(store, reads.snapshot(partition_log.prefix, entries, persisted_log_start), repair)
    if view.holes:
        # Still after several listings: a log object whose directory is unreadable. Those
        # offsets answer CORRUPT_MESSAGE.
        damage.record(partition_log.prefix, f"offsets {list(view.holes)} are in no readable piece")
    partition_log.apply_view(view, ProducerStates())
    partition_log.restore_producers(await _producer_states(partition_log))


async def _producer_states(partition_log: PartitionLog) -> ProducerStates:
    """Idempotent producers' recent sequences, from the batches of the newest pieces: a
    batch retried after a restart or an ownership move is then recognised as a duplicate
    and answered with its stored offset instead of being written again."""
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
    return states
