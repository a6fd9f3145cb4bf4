"""Merging small segments: a run of them becomes one segment, at the first one's key.

A quiet partition gets one small segment per ``compaction_delay_ms``, and data
written by earlier versions has one per flush. The owner of a partition merges
runs of at least ``MERGE_MIN`` consecutive segments of one size tier (a factor of
4), together at most ``segment.bytes``: the merged segment is in a higher tier, so
a byte is rewritten at most once per tier, not once per merge.

A merge cannot be fenced by ownership (a segment key is not a log-object slot), so
it is made safe for any merger, even a paused one that lost the partition:

1. The first segment is read with its version, and the merged one (its batches and
   the others') replaces it only if it is unchanged (If-Match on S3, a lock and a
   rename on the filesystem). A segment key's offset range therefore only ever grows
   (the cleaner rewrites a segment with the same range, fewer records).
2. Only then are the others deleted: each is now contained in the first key's
   segment, and stays so (that key only grows; retention deletes it only once all
   of it is below the log start). A late delete loses nothing.
3. The merged segment's index names its size (version 3) and is written first, so
   until the rewrite lands readers ignore it.

The merge reads one snapshot: after reading the others it checks that none changed
since (one HEAD each), and the conditional write checks the first. A cleaner rewrites
a compacted topic's segments in offset order, so any state a merge can see is a state
the log was in at one instant; without the check, a former owner's cleaner rewriting
segments during the merge could pair a segment from before its pass (a superseded
value still there) with one from after it (the tombstone gone), bringing a deleted key back.

Readers take each segment's range from its footer (:mod:`kafscale.protocol.log_view`)
and drop a segment contained in another; kill -9 between 1 and 2 leaves such
segments, which the owner deletes when it next loads the partition.
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.index import SegmentIndex, build_index
from kafscale.protocol.layout import index_key
from kafscale.protocol.log_view import SEGMENT, Piece
from kafscale.protocol.segment import SegmentBuilder, read_segment
from kafscale.storage_backends import ObjectChanged, ObjectNotFound

from ..storage import AsyncStore
from .partition_log import PartitionLog

# Smaller segments get no index object: a reader loads them whole anyway (8 MiB is one GET),
# and the index would be a second billed PUT per segment. Compaction uses the same rule.
INDEX_MIN_BYTES = 8 << 20

__all__ = ["MERGE_MIN", "merge", "merge_run", "delete_redundant", "index_before_rewrite"]

log = logging.getLogger("kafscale.merging")

MERGE_MIN = 4


async def index_before_rewrite(store: AsyncStore, key: str, size: int, index: SegmentIndex) -> None:
    """The index of a segment about to be rewritten in place (merged, cleaned), made durable
    before the rewrite: after a crash the old index must not outlive the old segment (an
    index names its segment's size, so until the rewrite lands readers ignore the new one)."""
    if size >= INDEX_MIN_BYTES:
        await store.put(key, index.encode())
    elif await store.head(key) is not None:
        # A small segment gets no index; an old one (a larger segment's, or one written by an
        # earlier version) goes. Looked for first: a HEAD is not in S3's billed tier, the
        # DELETE (a bulk POST through obstore) is.
        await store.delete(key)


def tier(size: int) -> int:
    return size.bit_length() // 2  # log4: sizes within a tier differ by at most 4x


def merge_run(pieces: list[Piece], log_start: int, segment_bytes: int) -> list[Piece] | None:
    """The first run of small consecutive segments worth merging, or ``None``."""
    run: list[Piece] = []
    total = 0
    for piece in pieces:
        if piece.kind != SEGMENT or piece.base_offset < log_start:
            if len(run) >= MERGE_MIN:
                return run
            run, total = [], 0
            continue
        fits = (run and piece.base_offset == run[-1].last_offset + 1 and tier(piece.size) == tier(run[0].size)
                and total + piece.size <= segment_bytes)
        if not fits:
            if len(run) >= MERGE_MIN:
                return run
            run, total = [], 0
        if piece.size * 2 <= segment_bytes:
            run.append(piece)
            total += piece.size
    return run if len(run) >= MERGE_MIN else None


async def merge(partition_log: PartitionLog) -> int:
    """Merge the partition's first run of small segments; returns how many were merged."""
    async def step() -> int:
        settings = partition_log.settings
        run = merge_run(partition_log.compacted_pieces(), partition_log.log_start_offset, settings.segment_bytes)
        if run is None or not partition_log.writable() or partition_log.fenced:
            return 0
        first = run[0]
        store = partition_log.store
        try:
            data, version = await store.get_versioned(first.key)
        except ObjectNotFound:
            return 0
        try:
            head = read_segment(data)
        except SegmentFormatError:
            return 0  # damaged: served in part by the read path, never rewritten
        if head.last_offset != first.last_offset:
            return 0  # rewritten by another merger since this gateway loaded the partition: not ours to merge now
        builder = SegmentBuilder(first.base_offset)
        for batch in head.batches:
            builder.skip_to(batch.base_offset)  # a cleaned segment's gaps stay gaps
            builder.append(head.batch_bytes(batch), [batch.at(position=0)])
        builder.skip_to(head.last_offset + 1)
        del data, head
        versions: list[tuple[str, str]] = []
        for piece in run[1:]:
            try:
                raw, seen = await store.get_versioned(piece.key)  # not the cache: its version is needed
                loaded = read_segment(raw)
            except (ObjectNotFound, SegmentFormatError):
                return 0  # merged away by an earlier owner, or damaged (left as it is)
            versions.append((piece.key, seen))
            for batch in loaded.batches:
                if batch.last_offset >= builder.next_offset:
                    builder.skip_to(batch.base_offset)
                    builder.append(loaded.batch_bytes(batch), [batch.at(position=0)])
            builder.skip_to(piece.last_offset + 1)
            del raw, loaded
        # One snapshot: every segment read is still as it was read (the first one is checked by
        # the conditional write). A cleaner rewriting them meanwhile (a paused former owner)
        # would otherwise let this merge pair a segment from before its pass with one from after.
        for key, seen in versions:
            if await store.version(key) != seen:
                log.warning("%s changed while it was merged; the merge is given up", key)
                return 0
        merged = await trio.to_thread.run_sync(builder.seal, partition_log.clock.now_ms())
        index = build_index(builder.batches, settings.index_interval, len(merged))
        namespace, topic, partition = settings.namespace, partition_log.topic, partition_log.partition
        await index_before_rewrite(store, index_key(namespace, topic, partition, first.base_offset), len(merged),
                                   index)
        try:
            await store.put_if_unchanged(first.key, merged, version)
        except ObjectChanged:
            log.warning("%s changed while it was merged; the merge is given up", first.key)
            return 0
        segment = Piece(SEGMENT, first.key, first.base_offset, builder.next_offset - 1, len(merged))
        partition_log.merged_into(run, segment, index.max_timestamp)
        # Each is contained in the rewritten first one from here on: one batched delete.
        await store.delete_many([key for piece in run[1:]
                                 for key in (piece.key, index_key(namespace, topic, partition, piece.base_offset))])
        log.info("merged %d segments of %s-%d (offsets %d..%d, %d bytes) into %s", len(run), topic, partition,
                 segment.base_offset, segment.last_offset, len(merged), first.key)
        return len(run)

    return await partition_log.maintain(step)


async def delete_redundant(partition_log: PartitionLog) -> int:
    """Delete segments found contained in another when the partition was loaded (a merge
    killed before its deletes, or a late copy): safe, the containing one stays."""
    async def step() -> int:
        doomed = partition_log.take_redundant()
        settings = partition_log.settings
        for segment in doomed:
            await partition_log.store.delete(segment.key)
            await partition_log.store.delete(index_key(settings.namespace, partition_log.topic,
                                                       partition_log.partition, segment.base_offset))
            log.info("deleted %s: its offsets are in an earlier segment", segment.key)
        return len(doomed)

    return await partition_log.maintain(step)


