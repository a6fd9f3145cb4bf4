"""Loading a partition: its segments and log-object entries, into one view.

The same rules as the Spark reader (:mod:`kafscale.protocol.log_view`); here with
the gateway's store and cache, plus what only a writer needs: a torn last
segment is moved aside, and idempotent-producer state is rebuilt from the
newest batches.
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol.errors import KafkaError
from kafscale.protocol.layout import parse_segment_key
from kafscale.protocol.log_view import StoredSegment, partition_view
from kafscale.protocol.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE
from kafscale.protocol.segment import segment_last as last_from_footer
from kafscale.storage_backends import ObjectNotFound

from .log_objects import LogObjects
from .partition_log import FlushTicket, PartitionLog
from .producers import ProducerStates
from .storage import AsyncStore

__all__ = ["recover", "segment_last", "list_segments"]

log = logging.getLogger("kafscale.recovery")

_LISTINGS = 3


async def segment_last(store: AsyncStore, key: str, base_offset: int, size: int) -> int | None:
    """A segment's last offset, from its footer (``None`` if torn; ObjectNotFound if gone)."""
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    return last_from_footer(base_offset, size, await store.get_range(key, size - SEGMENT_FOOTER_SIZE, size))


async def list_segments(store: AsyncStore, prefix: str, *, repair: bool = False) -> list[StoredSegment]:
    """A partition's segments, each with its last offset (footers read concurrently). A torn
    segment was never acknowledged (acks wait for the whole write); with ``repair`` a torn
    last one is moved aside so the offset can be written again, otherwise it is skipped. A
    segment deleted since the listing was merged into another (or is below the log start)."""
    listed = sorted((base, info.key, info.size) for info in await store.list(prefix)
                    if (base := parse_segment_key(info.key)) is not None)
    lasts: dict[str, int | None] = {}

    async def read_footer(base: int, key: str, size: int) -> None:
        try:
            lasts[key] = await segment_last(store, key, base, size)
        except ObjectNotFound:
            pass

    async with trio.open_nursery() as nursery:
        for base, key, size in listed:
            nursery.start_soon(read_footer, base, key, size)
    found = []
    for position, (base, key, size) in enumerate(listed):
        if key not in lasts:
            continue
        last = lasts[key]
        if last is not None:
            found.append(StoredSegment(base, key, size, last))
        elif position < len(listed) - 1:
            log.error("segment %s is torn or corrupt and not the last one; skipped", key)
        elif repair:
            log.error("segment %s is torn or corrupt; moving it aside as %s.torn", key, key)
            data = await store.get(key)
            await store.put(key + ".torn", data)
            await store.delete(key)
    return found


async def recover(partition_log: PartitionLog, objects: LogObjects, persisted_log_start: int = 0) -> None:
    """Rebuild the partition's pieces, log start, high watermark and producer state."""
    entries = objects.entries_for(partition_log.topic, partition_log.partition, partition_log.topic_id)
    for _attempt in range(_LISTINGS):
        segments = await list_segments(partition_log.store, partition_log.prefix, repair=True)
        view = partition_view(segments, entries, persisted_log_start)
        if not view.holes:
            break
        # A former owner's merge raced the listing (a segment deleted before its footer was
        # read, while the segment holding it was read before the rewrite): list again.
        log.warning("%s: offsets %s are in no listed piece; listing again", partition_log.prefix, view.holes)
    else:
        log.error("%s: offsets %s are in no piece (lost?)", partition_log.prefix, view.holes)
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
