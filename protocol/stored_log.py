"""Reading the stored log, sans-io: the one reader of what is in the store, for the gateway
and for Spark.

In the manner of h11, a reader does no I/O. It is a generator that yields a *step*, the
list of reads it needs now (independent of each other, so a driver may run them
concurrently), and is sent back their answers in the same order; it returns what it
read. The gateway drives readers on trio (``gateway/log/stored_log.py``), Spark with a
thread pool (``spark_connector/stored_log.py``); both apply the same rules:

- a partition's segments are listed and each one's last offset is read from its
  footer (one ranged read); a segment without a valid footer is *torn*: never
  acknowledged by a writer, repaired by the partition's owner, skipped by readers;
- a log object's directory comes from one ranged read of its tail (two when it is
  larger than that read);
- a partition's view (:func:`~.log_view.partition_view`) is listed again when a
  merge raced the listing (offsets in no piece), a bounded number of times.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from .errors import CorruptBatch, SegmentFormatError
from .index import SegmentIndex
from .layout import index_key_of_segment, log_prefix, parse_log_object_key, parse_segment_key
from .log_object import LogEntry, LogObjectDirectory, directory_from_tail, parse_directory, tail_start
from .log_view import SEGMENT, PartitionView, Piece, StoredSegment, first_record_at, partition_view
from .records import BatchHeader, split_batches
from .segment import SEGMENT_FOOTER_SIZE, SEGMENT_HEADER_SIZE, segment_last

__all__ = [
    "ListObjects",
    "ReadRange",
    "ReadObject",
    "RepairTorn",
    "MISSING",
    "LOAD_WHOLE",
    "segment_index",
    "segment_span",
    "segment_window",
    "window_span",
    "first_at_timestamp",
    "first_in_spans",
    "Read",
    "Reader",
    "SegmentListing",
    "gather",
    "list_segments",
    "segment_end",
    "snapshot",
    "segments_holding",
    "list_log_objects",
    "read_directory",
    "LISTINGS",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ListObjects:
    """Answered with ``[(key, size), …]`` of every object under ``prefix``."""

    prefix: str


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Answered with the object's bytes ``[start, end)``, or :data:`MISSING` if it is gone;
    ``view``: read-only, in the store's own buffer (bytes that are kept and served)."""

    key: str
    start: int
    end: int
    view: bool = False


@dataclass(frozen=True, slots=True)
class ReadObject:
    """Answered with the whole object, or :data:`MISSING` if it is gone."""

    key: str


@dataclass(frozen=True, slots=True)
class RepairTorn:
    """Segments without a valid footer, ``(base offset, key)``. Answered with the segments
    written again from their intact batches by the partition's owner, or ``[]`` by a
    reader that only skips them."""

    torn: tuple[tuple[int, str], ...]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # the answer to a read of an object that does not exist (deleted)


class _LoadWhole:
    def __repr__(self) -> str:
        return "LOAD_WHOLE"


LOAD_WHOLE: Any = _LoadWhole()  # a reader's result: this needs the whole piece, loaded as the caller loads pieces

Read = ListObjects | ReadRange | ReadObject | RepairTorn
Reader = Generator[list[Read], list[Any], T]

# Listings of a partition before its holes are taken as real (damaged log objects).
LISTINGS = 3


class SegmentListing(NamedTuple):
    segments: list[StoredSegment]  # each with its last offset, from its footer
    torn: list[tuple[int, str]]  # (base offset, key) of segments without a valid footer


def _no_last(key: str, size: int) -> int | None:
    return None


def list_segments(prefix: str, known_last: Callable[[str, int], int | None] = _no_last) -> Reader[SegmentListing]:
    """A partition's segments under ``prefix``, each with its last offset (``known_last``
    answers for footers read before: a key at one size always holds the same batches). A
    segment deleted since the listing was merged into another, or is below the log start."""
    (listed,) = yield [ListObjects(prefix)]
    candidates = sorted((base, key, size) for key, size in listed if (base := parse_segment_key(key)) is not None)
    lasts: dict[str, int | None] = {}
    unread = []
    for base, key, size in candidates:
        if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
            lasts[key] = None
        elif (known := known_last(key, size)) is not None:
            lasts[key] = known
        else:
            unread.append((base, key, size))
    if unread:
        tails = yield [ReadRange(key, size - SEGMENT_FOOTER_SIZE, size) for _, key, size in unread]
        for (base, key, size), tail in zip(unread, tails, strict=True):
            if tail is not MISSING:
                lasts[key] = segment_last(base, size, tail)
    found, torn = [], []
    for base, key, size in candidates:
        if key not in lasts:
            continue  # deleted since the listing
        last = lasts[key]
        if last is None:
            torn.append((base, key))
        else:
            found.append(StoredSegment(base, key, size, last))
    return SegmentListing(found, torn)


def segment_end(key: str, base_offset: int, size: int) -> Reader[int | None]:
    """One segment's last offset, from its footer; ``None`` if it is torn or gone."""
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    (tail,) = yield [ReadRange(key, size - SEGMENT_FOOTER_SIZE, size)]
    return None if tail is MISSING else segment_last(base_offset, size, tail)


def snapshot(prefix: str, entries: Iterable[LogEntry], persisted_log_start: int = 0,
             known_last: Callable[[str, int], int | None] = _no_last) -> Reader[PartitionView]:
    """A partition's view over its segments and ``entries`` (its log-object entries, listed
    *before* the segments, so an entry compacted in between is in one or the other).

    Listed again while a merge raced the listing: offsets in no piece (a segment deleted
    before its footer was read), or a segment that looks torn (rewritten larger in place, so
    the footer was read where its old end was). A segment is handed over for repair only when
    two listings in a row find it torn (or the last one does); holes left after
    :data:`LISTINGS` listings are offsets no readable piece holds (a damaged log object)."""
    entries = list(entries)
    view = partition_view((), entries, persisted_log_start)
    torn_before: set[tuple[int, str]] = set()
    for attempt in range(LISTINGS):
        listing = yield from list_segments(prefix, known_last)
        last_listing = attempt == LISTINGS - 1
        torn = [each for each in listing.torn if each in torn_before or last_listing]
        torn_before = set(listing.torn)
        segments = listing.segments
        if torn:
            (repaired,) = yield [RepairTorn(tuple(torn))]
            segments = segments + list(repaired)
        view = partition_view(segments, entries, persisted_log_start)
        if not view.holes and len(torn) == len(listing.torn):
            break
    return view


def segments_holding(prefix: str, first: int, last: int) -> Reader[list[StoredSegment]]:
    """The segments that hold offsets ``first..last`` now (for a piece deleted since it was
    listed: an entry compacted, or a segment merged into an earlier one); [] if not all of
    those offsets are in segments."""
    listing = yield from list_segments(prefix)
    if not partition_view(listing.segments, ()).holds(first, last):
        return []
    return [s for s in listing.segments if s.base_offset <= last and s.last_offset >= first]


def list_log_objects(namespace: str) -> Reader[list[tuple[str, int]]]:
    """``(key, size)`` of every shared log object of ``namespace``."""
    (listed,) = yield [ListObjects(log_prefix(namespace))]
    return [(key, size) for key, size in listed if parse_log_object_key(key) is not None]


def read_directory(key: str, size: int) -> Reader[LogObjectDirectory | None]:
    """A log object's directory (``None`` if the object is gone); :class:`SegmentFormatError`
    if it is torn or damaged."""
    (tail,) = yield [ReadRange(key, tail_start(size), size)]
    if tail is MISSING:
        return None
    found = directory_from_tail(key, size, tail)
    if isinstance(found, int):
        (body,) = yield [ReadRange(key, found, size)]
        return None if body is MISSING else parse_directory(key, body)
    return found


def segment_index(piece: Piece) -> Reader[SegmentIndex | None]:
    """The segment's sparse index if it has a usable one: present, intact, written for this
    size of the segment (a merge grows a segment at its key), with timestamps (version 2+).
    ``None`` otherwise: the index is derived data, the segment itself still answers."""
    if piece.kind != SEGMENT:
        return None
    (raw,) = yield [ReadObject(index_key_of_segment(piece.key))]
    if raw is MISSING:
        return None
    try:
        index = SegmentIndex.decode(raw)
    except SegmentFormatError:
        return None
    if index.version < 2 or not index.describes(piece.size) or not index.entries:
        return None
    return index


def first_at_timestamp(piece: Piece, timestamp: int, low: int, high: int,
                       *, skip_control: bool = False) -> Reader[tuple[int, int] | None]:
    """(offset, timestamp) of the piece's first record in ``[low, high)`` whose timestamp is
    at least ``timestamp`` (ListOffsets, Spark's startingTimestamp), through the segment's
    sparse index (:func:`segment_index`, then :func:`first_in_spans`). A piece without a
    usable index (a log-object entry, a small segment, an index of another size) answers
    :data:`LOAD_WHOLE`: the caller reads it whole (through its cache)."""
    index = yield from segment_index(piece)
    if index is None:
        return LOAD_WHOLE
    return (yield from first_in_spans(piece, index, timestamp, low, high, skip_control=skip_control))


def first_in_spans(piece: Piece, index: SegmentIndex, timestamp: int, low: int, high: int,
                   *, skip_control: bool = False) -> Reader[tuple[int, int] | None]:
    """As :func:`first_at_timestamp`, with the segment's index already read: only the spans
    between index entries whose greatest timestamp reaches ``timestamp`` are read, one
    ranged read each, until one holds the record."""
    entries = index.entries
    body_end = piece.size - SEGMENT_FOOTER_SIZE
    for number, entry in enumerate(entries):
        span_end = entries[number + 1].position if number + 1 < len(entries) else body_end
        next_offset = entries[number + 1].offset if number + 1 < len(entries) else piece.last_offset + 1
        if entry.max_timestamp < timestamp or next_offset <= low or entry.offset >= high:
            continue
        if not 0 <= entry.position < span_end <= body_end:
            return LOAD_WHOLE
        (span,) = yield [ReadRange(piece.key, entry.position, span_end)]
        if span is MISSING:
            return LOAD_WHOLE  # merged away since: the caller finds where its offsets are now
        try:
            batches = split_batches(span)
        except (SegmentFormatError, CorruptBatch):
            return LOAD_WHOLE  # damaged here: the whole read salvages what it can
        found = first_record_at(span, batches, timestamp, low, high, skip_control=skip_control)
        if found is not None:
            return found
    return None


def segment_span(piece: Piece, start: int, end: int) -> Reader[tuple[bytes, list[BatchHeader]] | _LoadWhole]:
    """The batches of a segment piece that hold offsets ``[start, end)``, read as one byte
    range between two entries of the segment's sparse index (each batch CRC-checked; the
    segment's own CRC covers the whole object and is checked by a whole read).
    :data:`LOAD_WHOLE` when the range covers the piece, there is no usable index, or the
    span does not read back as the index says."""
    if piece.kind != SEGMENT or (start <= piece.base_offset and end > piece.last_offset):
        return LOAD_WHOLE
    index = yield from segment_index(piece)
    if index is None:
        return LOAD_WHOLE
    entries = index.entries
    first = entries[0]
    for entry in entries:
        if entry.offset > start:
            break
        first = entry
    stop = next((entry.position for entry in entries if entry.offset >= end and entry.offset > first.offset),
                piece.size - SEGMENT_FOOTER_SIZE)
    if not SEGMENT_HEADER_SIZE <= first.position < stop <= piece.size - SEGMENT_FOOTER_SIZE:
        return LOAD_WHOLE
    read = yield from window_span(piece, first.position, stop)
    if not isinstance(read, tuple) or read[1][0].base_offset != first.offset:
        return LOAD_WHOLE  # damaged, merged away, or not what the index says: the whole read decides
    return read


def gather(readers: Iterable[Reader[T]]) -> Reader[list[T | SegmentFormatError]]:
    """Several readers as one, their steps merged so a driver runs their reads together;
    each one's result, or the :class:`SegmentFormatError` it raised, in order."""
    results: list[Any] = []
    waiting: dict[int, tuple[Reader[T], list[Read]]] = {}

    def advance(index: int, reader: Reader[T], answers: list[Any] | None) -> None:
        try:
            step = reader.send(answers)  # type: ignore[arg-type]  # None starts a generator
        except StopIteration as done:
            results[index] = done.value
        except SegmentFormatError as exc:
            results[index] = exc
        else:
            waiting[index] = (reader, step)

    for index, reader in enumerate(readers):
        results.append(None)
        advance(index, reader, None)
    while waiting:
        order = list(waiting)
        answers = yield [read for index in order for read in waiting[index][1]]
        position = 0
        for index in order:
            reader, step = waiting.pop(index)
            advance(index, reader, answers[position:position + len(step)])
            position += len(step)
    return results


def segment_window(piece: Piece, index: SegmentIndex, offset: int, window_bytes: int,
                   after: int | None = None) -> tuple[int, int] | None:
    """The byte range ``[start, stop)`` of a segment to read for ``offset`` in one bounded
    piece: from the last index entry at or before it (or, given ``after``, the end of the
    window read before, so a gap left by cleaning never reads the same window again) to the
    first entry at least ``window_bytes`` further (or the end of the body). ``None`` when
    the index does not fit the piece (the caller reads it whole)."""
    body_end = piece.size - SEGMENT_FOOTER_SIZE
    entries = index.entries
    if after is None:
        slot = max(bisect.bisect_right([entry.offset for entry in entries], offset) - 1, 0)
    else:
        slot = bisect.bisect_left([entry.position for entry in entries], after)
        if slot >= len(entries) or entries[slot].position != after:
            return None
    start = entries[slot].position
    stop = next((entry.position for entry in entries[slot + 1:] if entry.position >= start + window_bytes), body_end)
    if not SEGMENT_HEADER_SIZE <= start < stop <= body_end:
        return None
    return start, stop


def window_span(piece: Piece, start: int, stop: int) -> Reader[tuple[bytes, list[BatchHeader]] | _LoadWhole]:
    """The batches of a segment's bytes ``[start, stop)`` (each CRC-checked: the segment's
    own CRC covers the whole object). :data:`LOAD_WHOLE` when they do not read back as whole
    batches (damaged, or merged away since): the whole read decides."""
    (span,) = yield [ReadRange(piece.key, start, stop, view=True)]
    if span is MISSING:
        return LOAD_WHOLE
    try:
        batches = split_batches(span)
    except (SegmentFormatError, CorruptBatch):
        return LOAD_WHOLE
    return (span, batches) if batches else LOAD_WHOLE
