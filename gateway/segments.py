"""A partition's segments as stored: listed, each with its last offset read from its footer.

Shared by recovery (which also repairs torn segments), the read path (a segment merged
away under it) and the janitor (what another gateway's segments hold).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import NamedTuple

import trio

from kafscale.protocol.layout import parse_segment_key, segment_key, segment_partition
from kafscale.protocol.log_view import StoredSegment
from kafscale.protocol.records import BatchHeader, salvage_batches
from kafscale.protocol.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE, SegmentBuilder, segment_body_end
from kafscale.protocol.segment import segment_last as last_from_footer
from kafscale.storage_backends import ObjectExists, ObjectNotFound

from .damage import DamageReport
from .storage import AsyncStore

__all__ = ["segment_last", "list_segments", "SegmentListing", "repair_torn"]

_NO_LAST = 2**63 - 1  # a torn segment's last offset is unknown: walk as far as batches are intact


async def segment_last(store: AsyncStore, key: str, base_offset: int, size: int) -> int | None:
    """A segment's last offset, from its footer (``None`` if torn; ObjectNotFound if gone)."""
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    return last_from_footer(base_offset, size, await store.get_range(key, size - SEGMENT_FOOTER_SIZE, size))


class SegmentListing(NamedTuple):
    segments: list[StoredSegment]  # each with its last offset, from its footer
    torn: list[tuple[int, str]]  # (base offset, key) of segments without a valid footer


async def list_segments(store: AsyncStore, prefix: str) -> SegmentListing:
    """A partition's segments, each with its last offset (footers read concurrently), and
    those whose footer is torn or damaged. A segment deleted since the listing was merged
    into another (or is below the log start)."""
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
    found, torn = [], []
    for base, key, size in listed:
        if key not in lasts:
            continue
        last = lasts[key]
        if last is not None:
            found.append(StoredSegment(base, key, size, last))
        else:
            torn.append((base, key))
    return SegmentListing(found, torn)


async def repair_torn(store: AsyncStore, torn: list[tuple[int, str]], damage: DamageReport) -> list[StoredSegment]:
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
        batches, _ = salvage_batches(data, SEGMENT_HEADER_SIZE, segment_body_end(data), base, _NO_LAST)
        runs: list[list[BatchHeader]] = []
        for batch in batches:
            if runs and runs[-1][-1].last_offset + 1 == batch.base_offset:
                runs[-1].append(batch)
            else:
                runs.append([batch])
        kept = sum(batch.records_count for batch in batches)
        damage.record(key, f"segment torn or damaged; moved aside as {key}.torn, {kept} intact records kept")
        await store.put(key + ".torn", data)
        await store.delete(key)
        namespace, topic, partition = segment_partition(key) or ("", "", 0)
        for run in runs:
            builder = SegmentBuilder(run[0].base_offset)
            for batch in run:
                builder.append(memoryview(data)[batch.position:batch.position + batch.size],
                               [replace(batch, position=0)])
            sealed = builder.seal(int(time.time() * 1000))
            run_key = segment_key(namespace, topic, partition, run[0].base_offset)
            try:
                await store.put_if_absent(run_key, bytes(sealed))
            except ObjectExists:
                continue  # an earlier repair wrote it
            repaired.append(StoredSegment(run[0].base_offset, run_key, len(sealed), run[-1].last_offset))
    return repaired
