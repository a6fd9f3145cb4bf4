"""One partition's log as stored: segments, then the ranges still in log objects.

The gateway (recovery, reads, retention) and the Spark reader both build their
view of a partition here, from what they listed and read, so they see the same
log. The rules:

- A segment ``segment-{base}.kfs`` holds exactly the offsets from its base (its
  key) to its last offset (its footer). Segments may overlap: merging small
  segments rewrites the first of them with all their batches before the others
  are deleted, and a segment contained in another is *redundant* (dropped here,
  deleted by the owner). Offsets held twice are the same stored batch, byte for
  byte: fencing guarantees no offset is ever claimed twice.
- Log-object entries hold the rest. An entry contained in what segments hold is
  dropped; one that overlaps them is kept (a reader skips the batches it has).
- Within a writer's sequence, nothing after a seal of every partition counts: that
  writer was declared dead there. (A seal naming partitions needs no such rule: the
  writer reads it before writing on, and writes a sealed partition again only after
  it took the partition back, fencing everyone else first.)
- The high watermark is one past the last offset of any piece; the log start is
  the first piece's base, or the persisted one (DeleteRecords) if later. Offsets
  between them that no piece holds are *holes*: a listing that raced a merge (a
  segment deleted before its footer was read); readers list again.

Everything here is pure (no I/O); :func:`first_record_at` scans one loaded piece.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from .layout import parse_log_object_key
from .log_object import LogEntry, LogObjectDirectory
from .records import BatchHeader, iter_records

__all__ = ["Piece", "PartitionView", "StoredSegment", "entries_by_partition", "entries_of_writers", "partition_view", "first_record_at",
           "pieces_from"]

SEGMENT = "segment"
ENTRY = "entry"


class Piece(NamedTuple):
    """A run of whole batches of one partition, in a segment or in a log object (a named
    tuple: one per entry indexed, made on every flush)."""

    kind: str  # SEGMENT or ENTRY
    key: str
    base_offset: int
    last_offset: int
    size: int  # bytes to read: the whole segment object, or the entry's length
    entry: LogEntry | None = None  # for ENTRY pieces

    @property
    def cache_key(self) -> str:
        # A segment key rewritten by a merge holds more bytes: the size tells the versions apart.
        return f"{self.key}@{self.size}" if self.entry is None else f"{self.key}#{self.entry.position}"

    @property
    def max_timestamp(self) -> int | None:
        return None if self.entry is None else self.entry.max_timestamp


@dataclass(frozen=True, slots=True)
class StoredSegment:
    """A listed segment whose footer was read."""

    base_offset: int
    key: str
    size: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    pieces: tuple[Piece, ...]  # by base offset; a piece may overlap the one before (same bytes)
    log_start: int
    high_watermark: int
    compacted_end: int  # one past the last offset in segments (0 without segments)
    redundant: tuple[StoredSegment, ...] = ()  # segments contained in another one
    holes: tuple[tuple[int, int], ...] = ()  # (first, last) ranges above the log start held by nothing

    def holds(self, first: int, last: int) -> bool:
        """Whether the pieces hold every offset in ``[first, last]``."""
        ranges = _Ranges()
        for piece in self.pieces:
            ranges.add(piece.base_offset, piece.last_offset)
        return ranges.holds(first, last)


def entries_by_partition(directories: Iterable[LogObjectDirectory]) -> dict[tuple[str, int], list[LogEntry]]:
    """The valid entries of every partition, from the directories of log objects of any writers."""
    by_writer: dict[str, list[LogObjectDirectory]] = defaultdict(list)
    for directory in directories:
        parsed = parse_log_object_key(directory.key)
        by_writer[parsed[0] if parsed else directory.key].append(directory)
    return entries_of_writers(by_writer.values())


def entries_of_writers(writers: Iterable[Iterable[LogObjectDirectory]]) -> dict[tuple[str, int], list[LogEntry]]:
    """The valid entries of every partition, from each writer's log objects (in any order)."""
    found: dict[tuple[str, int], list[LogEntry]] = defaultdict(list)
    for objects in writers:
        for directory in sorted(objects, key=lambda d: d.sequence):
            if directory.seals_all:
                break
            if directory.is_seal:
                continue
            for entry in directory.entries:
                found[(entry.topic, entry.partition)].append(entry)
    return found


def partition_view(segments: Iterable[StoredSegment], entries: Iterable[LogEntry],
                   persisted_log_start: int = 0) -> PartitionView:
    """The partition's log from its segments (torn ones removed) and log-object entries."""
    pieces: list[Piece] = []
    redundant: list[StoredSegment] = []
    held = _Ranges()
    for segment in sorted(segments, key=lambda s: (s.base_offset, -s.last_offset)):
        if held.holds(segment.base_offset, segment.last_offset):
            redundant.append(segment)  # merged into the segment before it
            continue
        pieces.append(Piece(SEGMENT, segment.key, segment.base_offset, segment.last_offset, segment.size))
        held.add(segment.base_offset, segment.last_offset)
    compacted_end = pieces[-1].last_offset + 1 if pieces else 0
    for entry in sorted(entries, key=lambda e: (e.base_offset, -e.last_offset)):
        if held.holds(entry.base_offset, entry.last_offset):
            continue  # compacted, or the same range in an object written twice
        pieces.append(Piece(ENTRY, entry.key, entry.base_offset, entry.last_offset, entry.length, entry))
        held.add(entry.base_offset, entry.last_offset)
    pieces.sort(key=lambda p: (p.base_offset, p.kind != SEGMENT))
    high_watermark = max((p.last_offset + 1 for p in pieces), default=0)
    log_start = pieces[0].base_offset if pieces else 0
    log_start = min(max(log_start, persisted_log_start), high_watermark)
    holes = []
    covered = log_start
    for piece in pieces:
        if piece.base_offset > covered:
            holes.append((covered, piece.base_offset - 1))
        covered = max(covered, piece.last_offset + 1)
    return PartitionView(tuple(pieces), log_start, high_watermark, compacted_end, tuple(redundant), tuple(holes))


class _Ranges:
    """Disjoint offset ranges, sorted: what the pieces taken so far hold."""

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def holds(self, first: int, last: int) -> bool:
        slot = bisect.bisect_right(self._firsts, first) - 1
        return slot >= 0 and self._lasts[slot] >= last

    def add(self, first: int, last: int) -> None:
        low = bisect.bisect_left(self._lasts, first - 1)  # the first range touching [first, last]
        high = bisect.bisect_right(self._firsts, last + 1)
        if low < high:
            first = min(first, self._firsts[low])
            last = max(last, self._lasts[high - 1])
        self._firsts[low:high] = [first]
        self._lasts[low:high] = [last]


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
