"""A partition's segments as stored: listed, each with its last offset read from its footer.

Shared by recovery (which also repairs a torn last segment), the read path (a segment
merged away under it) and the janitor (what another gateway's segments hold).
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol.layout import parse_segment_key
from kafscale.protocol.log_view import StoredSegment
from kafscale.protocol.segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE
from kafscale.protocol.segment import segment_last as last_from_footer
from kafscale.storage_backends import ObjectNotFound

from .storage import AsyncStore

__all__ = ["segment_last", "list_segments"]

log = logging.getLogger("kafscale.segments")


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
