"""One partition's log as stored: compacted segments, then the ranges still in log objects.

The gateway (recovery, reads, retention) and the Spark reader both build their
view of a partition here, from what they listed and read, so they see the same
log. The rules:

- Segments ``segment-{base}.kfs`` tile the compacted part: each holds the offsets
  from its base up to the next segment's base; the last one's footer gives its end.
- Log-object entries hold the rest. An entry already covered by segments is
  dropped; one that overlaps the compacted end is kept (a reader skips the batches
  it has). Any offset held by two pieces is the same stored batch, byte for byte:
  fencing guarantees no offset is ever claimed twice.
- Within a writer's sequence, nothing after a seal of every partition counts: that
  writer was declared dead there. (A seal naming partitions needs no such rule: the
  writer reads it before writing on, and writes a sealed partition again only after
  it took the partition back, fencing everyone else first.)
- The high watermark is one past the last offset of any piece; the log start is
  the first piece's base, or the persisted one (DeleteRecords) if later.

Everything here is pure (no I/O); :func:`first_record_at` scans one loaded piece.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from .layout import parse_log_object_key
from .log_object import LogEntry, LogObjectDirectory
from .records import BatchHeader, iter_records

__all__ = ["Piece", "PartitionView", "entries_by_partition", "partition_view", "first_record_at", "pieces_from"]

SEGMENT = "segment"
ENTRY = "entry"


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of whole batches of one partition, in a segment or in a log object."""

    kind: str  # SEGMENT or ENTRY
    key: str
    base_offset: int
    last_offset: int
    size: int  # bytes to read: the whole segment object, or the entry's length
    entry: LogEntry | None = None  # for ENTRY pieces

    @property
    def cache_key(self) -> str:
        return self.key if self.entry is None else f"{self.key}#{self.entry.position}"

    @property
    def max_timestamp(self) -> int | None:
        return None if self.entry is None else self.entry.max_timestamp


@dataclass(frozen=True, slots=True)
class PartitionView:
    pieces: tuple[Piece, ...]  # by base offset; a piece may overlap the one before (same bytes)
    log_start: int
    high_watermark: int
    compacted_end: int  # one past the last offset in segments (0 without segments)


def entries_by_partition(directories: Iterable[LogObjectDirectory]) -> dict[tuple[str, int], list[LogEntry]]:
    """The valid entries of every partition, from the directories of log objects of any writers."""
    by_writer: dict[str, list[LogObjectDirectory]] = defaultdict(list)
    for directory in directories:
        parsed = parse_log_object_key(directory.key)
        by_writer[parsed[0] if parsed else directory.key].append(directory)
    found: dict[tuple[str, int], list[LogEntry]] = defaultdict(list)
    for objects in by_writer.values():
        for directory in sorted(objects, key=lambda d: d.sequence):
            if directory.seals_all:
                break
            if directory.is_seal:
                continue
            for entry in directory.entries:
                found[(entry.topic, entry.partition)].append(entry)
    return found


def partition_view(segments: list[tuple[int, str, int]], last_segment_end: int | None,
                   entries: Iterable[LogEntry], persisted_log_start: int = 0) -> PartitionView:
    """The partition's log from its segments ``(base, key, size)`` (sorted, torn ones removed),
    the end (last offset + 1) of the last of them, and its log-object entries."""
    pieces: list[Piece] = []
    for i, (base, key, size) in enumerate(segments):
        last = segments[i + 1][0] - 1 if i + 1 < len(segments) else (last_segment_end or base) - 1
        pieces.append(Piece(SEGMENT, key, base, last, size))
    compacted_end = pieces[-1].last_offset + 1 if pieces else 0
    reach = compacted_end
    for entry in sorted(entries, key=lambda e: (e.base_offset, e.last_offset)):
        if entry.last_offset < reach:
            continue  # compacted, or the same range in an object written twice
        pieces.append(Piece(ENTRY, entry.key, entry.base_offset, entry.last_offset, entry.length, entry))
        reach = entry.last_offset + 1
    high_watermark = reach
    log_start = pieces[0].base_offset if pieces else 0
    log_start = min(max(log_start, persisted_log_start), high_watermark)
    return PartitionView(tuple(pieces), log_start, high_watermark, compacted_end)


def pieces_from(pieces: tuple[Piece, ...] | list[Piece], offset: int) -> list[Piece]:
    """The pieces to read, in order, for offsets from ``offset`` on."""
    bases = [piece.base_offset for piece in pieces]
    slot = max(bisect.bisect_right(bases, offset) - 1, 0)
    return [piece for piece in pieces[slot:] if piece.last_offset >= offset]


def first_record_at(data: bytes, batches: list[BatchHeader], timestamp: int, low: int, high: int,
                    *, skip_control: bool = False) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record in ``[low, high)`` whose timestamp is at least
    ``timestamp``, among one piece's batches (ListOffsets by timestamp, Spark's
    startingTimestamp)."""
    for batch in batches:
        if batch.max_timestamp < timestamp or batch.last_offset < low or (skip_control and batch.is_control):
            continue
        for record in iter_records(data, batch):
            if record.timestamp >= timestamp and low <= record.offset < high:
                return record.offset, record.timestamp
    return None
