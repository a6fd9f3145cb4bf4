"""Loading a partition: its segments and log-object entries, into one view.

The same rules as the Spark reader (:mod:`kafscale.protocol.log_view`); here with
the gateway's store and cache, plus what only a writer needs: a torn last
segment is moved aside, and idempotent-producer state is rebuilt from the
newest batches.
"""

from __future__ import annotations

import logging

from kafscale.protocol.errors import KafkaError
from kafscale.protocol.layout import parse_segment_key
from kafscale.protocol.log_view import partition_view
from kafscale.protocol.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE
from kafscale.protocol.segment import segment_end as end_of_segment

from .log_objects import LogObjects
from .partition_log import FlushTicket, PartitionLog
from .producers import ProducerStates
from .storage import AsyncStore

__all__ = ["recover", "segment_end", "list_segments"]

log = logging.getLogger("kafscale.recovery")


async def segment_end(store: AsyncStore, key: str, size: int) -> int | None:
    """One past the last offset of a segment, from its header and footer (``None`` if torn)."""
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    head = await store.get_range(key, 0, SEGMENT_HEADER_SIZE)
    return end_of_segment(size, head, await store.get_range(key, size - SEGMENT_FOOTER_SIZE, size))


async def list_segments(store: AsyncStore, prefix: str, *, repair: bool = False
                        ) -> tuple[list[tuple[int, str, int]], int | None]:
    """A partition's segments ``(base, key, size)`` and the end of the last one. A torn last
    segment was never acknowledged (acks wait for the whole write); with ``repair`` it is
    moved aside so the offset can be written again, otherwise just skipped."""
    found = sorted(
        (base, info.key, info.size)
        for info in await store.list(prefix)
        if (base := parse_segment_key(info.key)) is not None
    )
    while found:
        base, key, size = found[-1]
        end = await segment_end(store, key, size)
        if end is not None:
            return found, end
        found.pop()
        if repair:
            log.error("segment %s is torn or corrupt; moving it aside as %s.torn", key, key)
            data = await store.get(key)
            await store.put(key + ".torn", data)
            await store.delete(key)
    return [], None


async def recover(partition_log: PartitionLog, objects: LogObjects, persisted_log_start: int = 0) -> None:
    """Rebuild the partition's pieces, log start, high watermark and producer state."""
    segments, end = await list_segments(partition_log.store, partition_log.prefix, repair=True)
    entries = objects.entries_for(partition_log.topic, partition_log.partition, partition_log.topic_id)
    view = partition_view(segments, end, entries, persisted_log_start)
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
