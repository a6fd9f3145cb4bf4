"""The Kafscale sparse index object: (offset, position, max timestamp) entries.

::

    header (16 bytes, big-endian)
      0  magic          4  0x00494458 (the spec's "IDX" as a 4-byte integer: b"\\x00IDX")
      4  version        2  1 = 12-byte entries, 2 = 20-byte entries (with max timestamp),
                           3 = as 2, then the size (u64) of the segment it describes
      6  entry_count    4
      10 interval       4  records between entries (at least)
      14 reserved       2  0
    entries, ascending by offset
      offset        8  base offset of a batch
      position      4  byte position of that batch in the segment object
      max_timestamp 8  (v2) greatest timestamp from this entry up to the next one

Version 3 names its segment's size because a segment key can be rewritten with more
batches (merging small segments): an index for another size is not this segment's,
and readers ignore it (:meth:`SegmentIndex.describes`).

The index is derived data: if it is missing or corrupt it can be rebuilt from
its segment, so a reader rejects it (:class:`SegmentFormatError`) rather than
guessing.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from .errors import SegmentFormatError
from .records import BatchHeader

__all__ = ["INDEX_HEADER_SIZE", "IndexEntry", "SegmentIndex", "build_index"]

INDEX_MAGIC = 0x00494458
INDEX_HEADER_SIZE = 16
_HEADER = struct.Struct(">IHIIH")
_ENTRY_V1 = struct.Struct(">qI")
_ENTRY_V2 = struct.Struct(">qIq")
_SEGMENT_SIZE = struct.Struct(">Q")
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class IndexEntry:
    offset: int
    position: int
    max_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    entries: tuple[IndexEntry, ...]
    interval: int
    version: int = 3
    segment_size: int | None = None  # version 3

    def encode(self) -> bytes:
        out = bytearray(_HEADER.pack(INDEX_MAGIC, self.version, len(self.entries), self.interval, 0))
        for item in self.entries:
            if self.version >= 2:
                out += _ENTRY_V2.pack(item.offset, item.position, item.max_timestamp)
            else:
                out += _ENTRY_V1.pack(item.offset, item.position)
        if self.version == 3:
            out += _SEGMENT_SIZE.pack(self.segment_size or 0)
        return bytes(out)

    def describes(self, segment_size: int) -> bool:
        """Whether this index is the one of a segment of ``segment_size`` bytes (versions
        before 3 do not say: taken as it is)."""
        return self.segment_size is None or self.segment_size == segment_size

    @classmethod
    def decode(cls, data: bytes) -> SegmentIndex:
        if len(data) < INDEX_HEADER_SIZE:
            raise SegmentFormatError(f"index truncated ({len(data)} of 16 header bytes)")
        magic, version, count, interval, _reserved = _HEADER.unpack_from(data, 0)
        if magic != INDEX_MAGIC:
            raise SegmentFormatError(f"bad index magic {magic:#010x}")
        if version not in (1, 2, 3):
            raise SegmentFormatError(f"unsupported index version {version}")
        entry = _ENTRY_V1 if version == 1 else _ENTRY_V2
        trailer = _SEGMENT_SIZE.size if version == 3 else 0
        if len(data) != INDEX_HEADER_SIZE + count * entry.size + trailer:
            raise SegmentFormatError(
                f"index of {len(data)} bytes does not hold the {count} entries its header announces"
            )
        entries = []
        previous = -1
        for pos in range(INDEX_HEADER_SIZE, len(data) - trailer, entry.size):
            fields = entry.unpack_from(data, pos)
            item = IndexEntry(*fields)
            if item.offset <= previous:
                raise SegmentFormatError("index entries are not in ascending offset order")
            previous = item.offset
            entries.append(item)
        segment_size = _SEGMENT_SIZE.unpack_from(data, len(data) - trailer)[0] if trailer else None
        return cls(tuple(entries), interval, version, segment_size)

    def position_for_offset(self, offset: int) -> int | None:
        """Byte position of the last indexed batch starting at or before ``offset``."""
        offsets = [entry.offset for entry in self.entries]
        slot = bisect.bisect_right(offsets, offset) - 1
        return self.entries[slot].position if slot >= 0 else None

    def entry_for_timestamp(self, timestamp: int) -> IndexEntry | None:
        """First entry whose span holds a timestamp ``>= timestamp`` (needs version 2)."""
        for entry in self.entries:
            if entry.max_timestamp >= timestamp:
                return entry
        return None

    @property
    def max_timestamp(self) -> int:
        return max((entry.max_timestamp for entry in self.entries), default=NO_TIMESTAMP)


def build_index(batches: list[BatchHeader], interval: int = 1000, segment_size: int | None = None) -> SegmentIndex:
    """Index ``batches`` (positions absolute in their segment of ``segment_size`` bytes): the
    first batch and then every batch that starts at least ``interval`` records after the
    previous entry. Without a size, a version 2 index."""
    if interval <= 0:
        raise ValueError("index interval must be positive")
    entries: list[IndexEntry] = []
    current: IndexEntry | None = None
    for batch in batches:
        if current is None or batch.base_offset - current.offset >= interval:
            if current is not None:
                entries.append(current)
            current = IndexEntry(batch.base_offset, batch.position, batch.max_timestamp)
        elif batch.max_timestamp > current.max_timestamp:
            current = IndexEntry(current.offset, current.position, batch.max_timestamp)
    if current is not None:
        entries.append(current)
    if segment_size is None:
        return SegmentIndex(tuple(entries), interval, 2)
    return SegmentIndex(tuple(entries), interval, 3, segment_size)
