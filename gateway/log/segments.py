"""A partition's segments as stored: listed with their last offsets, and the owner's repair
of torn ones."""

from __future__ import annotations

from kafscale.protocol import stored_log as reads
from kafscale.protocol.layout import segment_key, segment_partition
from kafscale.protocol.log_view import StoredSegment
from kafscale.protocol.records import BatchHeader, salvage_batches
from kafscale.protocol.segment import (
    SEGMENT_HEADER_SIZE,
    SegmentBuilder,
    parse_segment_header,
    segment_body_end,
    segment_has_gaps,
)
from kafscale.protocol.stored_log import SegmentListing
from kafscale.storage_backends import ObjectExists, ObjectNotFound

from ..storage import AsyncStore
from .damage import DamageReport
from .stored_log import read_stored

__all__ = ["list_segments", "SegmentListing", "repair_torn"]

_NO_LAST = 2**63 - 1  # a torn segment's last offset is unknown: walk as far as batches are intact


async def list_segments(store: AsyncStore, prefix: str) -> SegmentListing:
    """A partition's segments, each with its last offset, and those whose footer is torn
    or damaged (:func:`kafscale.protocol.stored_log.list_segments`)."""
    return await read_stored(store, reads.list_segments(prefix))


async def repair_torn(store: AsyncStore, torn: list[tuple[int, str]], damage: DamageReport,
                      now_ms: int) -> list[StoredSegment]:
    """The owner's repair of segments without a valid footer (truncated, or damaged): each is
    moved aside as ``{key}.torn`` and its intact batches are written again, one segment per
    unbroken run of them, so nothing readable is discarded. Offsets lost with the damaged
    part are served as CORRUPT_MESSAGE (PartitionLog.read)."""
    repaired = []
    for base, key in torn:
        try:
            data = await store.get(key)
        except ObjectNotFound:
            continue
        cleaned = segment_has_gaps(data)
        first = parse_segment_header(data).base_offset if cleaned else base
        # A cleaned segment's batches leave gaps by design: walked batch by batch, not by offset.
        batches, damaged = salvage_batches(data, SEGMENT_HEADER_SIZE, segment_body_end(data), first, _NO_LAST,
                                           gaps=cleaned)
        damaged_starts = [start for start, _ in damaged]
        runs: list[list[BatchHeader]] = []
        for batch in batches:
            follows = bool(runs) and runs[-1][-1].last_offset + 1 == batch.base_offset
            # Across a gap cleaning left (no damaged range in it), one run goes on.
            over_gap = cleaned and bool(runs) and not any(runs[-1][-1].last_offset < start < batch.base_offset
                                                    for start in damaged_starts)
            if follows or over_gap:
                runs[-1].append(batch)
            else:
                runs.append([batch])
        kept = sum(batch.records_count for batch in batches)
        damage.record(key, f"segment torn or damaged; moved aside as {key}.torn, {kept} intact records kept")
        await store.put(key + ".torn", data)
        await store.delete(key)
        namespace, topic, partition = segment_partition(key) or ("", "", 0)
        for index, run in enumerate(runs):
            # The first run keeps the segment's base: offsets before its first batch were cleaned.
            run_base = first if index == 0 and cleaned else run[0].base_offset
            builder = SegmentBuilder(run_base)
            for batch in run:
                builder.skip_to(batch.base_offset)
                builder.append(memoryview(data)[batch.position:batch.position + batch.size],
                               [batch.at(position=0)])
            sealed = builder.seal(now_ms)
            run_key = segment_key(namespace, topic, partition, run_base)
            try:
                await store.put_if_absent(run_key, bytes(sealed))
            except ObjectExists:
                continue  # an earlier repair wrote it
            repaired.append(StoredSegment(run_base, run_key, len(sealed), run[-1].last_offset))
    return repaired
