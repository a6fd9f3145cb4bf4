"""Loading a partition: its segments and log-object entries, into one view.

The same rules as the Spark reader (:mod:`kafscale.protocol.log_view`); here with
the gateway's store and cache, plus what only the owner does: torn segments are
repaired (their intact batches kept), and idempotent-producer state is rebuilt
from the newest batches.
"""

from __future__ import annotations

import logging

from kafscale.protocol.errors import KafkaError
from kafscale.protocol.log_view import partition_view

from .log_objects import LogObjects
from .partition_log import FlushTicket, PartitionLog
from .producers import ProducerStates
from .segments import list_segments, repair_torn

__all__ = ["recover"]

log = logging.getLogger("kafscale.recovery")

_LISTINGS = 3


async def recover(partition_log: PartitionLog, objects: LogObjects, persisted_log_start: int = 0) -> None:
    """Rebuild the partition's pieces, log start, high watermark and producer state."""
    entries = objects.entries_for(partition_log.topic, partition_log.partition, partition_log.topic_id)
    for _attempt in range(_LISTINGS):
        listing = await list_segments(partition_log.store, partition_log.prefix)
        segments = listing.segments
        if listing.torn:
            segments += await repair_torn(partition_log.store, listing.torn, partition_log.damage)
        view = partition_view(segments, entries, persisted_log_start)
        if not view.holes:
            break
        # A former owner's merge raced the listing (a segment deleted before its footer was
        # read, while the segment holding it was read before the rewrite): list again.
        log.warning("%s: offsets %s are in no listed piece; listing again", partition_log.prefix, view.holes)
    else:
        # A log object whose directory is unreadable: those offsets answer CORRUPT_MESSAGE.
        partition_log.damage.record(partition_log.prefix, f"offsets {list(view.holes)} are in no readable piece")
    partition_log.apply_view(view, ProducerStates())
    partition_log.producers = await _producer_states(partition_log)


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
    states = ProducerStates()
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
