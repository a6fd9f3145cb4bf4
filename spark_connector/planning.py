"""Planning on the driver: a consistent, committed snapshot of each partition to read.

Only what a gateway has acknowledged is read, and the log is the gateway's:
:func:`kafscale.protocol.log_view.partition_view` over the partition's segments
(each with its last offset from its footer; a torn one is ignored, as the
gateway ignores it) and its entries in the
shared log objects. Log objects are listed *before* segments, so an entry
compacted in between is found in one or the other. The log start is the first
piece or the one DeleteRecords persisted in the topic metadata, whichever is
later. Each input partition carries the pieces executors read, so executors
never list (except to find the segment of an entry compacted and deleted since).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kafscale.protocol.catalog import catalog_prefix, decode_catalog, newest_catalog_key
from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import log_prefix, parse_log_object_key, parse_segment_key, partition_prefix, topics_key
from kafscale.protocol.log_object import LogEntry, directory_from_tail, parse_directory, tail_start
from kafscale.protocol.log_view import (
    PartitionView,
    Piece,
    StoredSegment,
    entries_by_partition,
    first_record_at,
    partition_view,
)
from kafscale.protocol.segment import SEGMENT_FOOTER_SIZE, segment_last
from kafscale.storage_backends import ObjectNotFound, ObjectStore

from .options import EARLIEST, LATEST, OptionError, ReadOptions

__all__ = ["PartitionRange", "plan", "DataLossError", "LogEntries", "snapshot", "pieces_for", "list_segments",
           "segments_holding"]

_DIRECTORY_READS = 16


class DataLossError(RuntimeError):
    """Requested offsets are no longer stored (retention or DeleteRecords removed them)."""


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # one past the last offset to read
    pieces: tuple[Piece, ...]


def _topics(store: ObjectStore, namespace: str) -> dict[str, dict]:
    """The topic catalog: a cluster's newest mirror of etcd's, or a lone gateway's document."""
    key = newest_catalog_key([info.key for info in store.list(catalog_prefix(namespace))]) or topics_key(namespace)
    try:
        return decode_catalog(store.get(key))[0]
    except ObjectNotFound:
        return {}


class LogEntries:
    """Every partition's entries in the shared log objects, read once per plan."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        listed = [(info.key, info.size) for info in store.list(log_prefix(namespace))
                  if parse_log_object_key(info.key) is not None]

        def read(item: tuple[str, int]):
            key, size = item
            try:
                found = directory_from_tail(key, size, store.get_range(key, tail_start(size), size))
                return parse_directory(key, store.get_range(key, found, size)) if isinstance(found, int) else found
            except (ObjectNotFound, SegmentFormatError):
                return None  # deleted since the listing (compacted), or torn: never acknowledged

        with ThreadPoolExecutor(_DIRECTORY_READS) as pool:
            directories = [d for d in pool.map(read, listed) if d is not None]
        self._entries = entries_by_partition(directories)

    def of(self, topic: str, partition: int, topic_id: str | None) -> list[LogEntry]:
        wanted = bytes.fromhex(topic_id.replace("-", "")) if topic_id else None
        return [e for e in self._entries.get((topic, partition), ()) if wanted is None or e.topic_id == wanted]


# Within one incarnation of a topic (its id), a segment key at one size always holds the same
# batches (a merge adds batches, so it changes the size): last offsets read from footers are
# kept by (store, topic id, key, size) across plans (a streaming query plans every micro-batch).
_LAST_OFFSETS: dict[tuple[str, str, str, int], int] = {}
_LAST_OFFSETS_KEPT = 100_000
_LISTINGS = 3


def _segment_last(store: ObjectStore, topic_id: str | None, base: int, key: str, size: int) -> StoredSegment | None:
    remembered = (store.describe(), topic_id, key, size) if topic_id else None
    last = _LAST_OFFSETS.get(remembered) if remembered else None
    if last is None:
        try:
            last = segment_last(base, size, store.get_range(key, max(size - SEGMENT_FOOTER_SIZE, 0), size))
        except ObjectNotFound:
            return None  # merged into an earlier segment since the listing
        if last is None:
            return None  # torn: never acknowledged, never served
        if remembered:
            if len(_LAST_OFFSETS) >= _LAST_OFFSETS_KEPT:
                _LAST_OFFSETS.clear()
            _LAST_OFFSETS[remembered] = last
    return StoredSegment(base, key, size, last)


def list_segments(store: ObjectStore, namespace: str, topic: str, partition: int,
                  topic_id: str | None = None) -> list[StoredSegment]:
    """The partition's segments with their last offsets (footers read concurrently; remembered
    only when the topic's id is known)."""
    listed = sorted((base, info.key, info.size) for info in store.list(partition_prefix(namespace, topic, partition))
                    if (base := parse_segment_key(info.key)) is not None)
    with ThreadPoolExecutor(_DIRECTORY_READS) as pool:
        return [s for s in pool.map(lambda item: _segment_last(store, topic_id, *item), listed) if s is not None]


def snapshot(store: ObjectStore, namespace: str, topic: str, partition: int, persisted_log_start: int,
             entries: list[LogEntry], topic_id: str | None = None) -> PartitionView:
    """The partition's view; listed again if a merge raced the listing (offsets in no piece)."""
    for _attempt in range(_LISTINGS):
        view = partition_view(list_segments(store, namespace, topic, partition, topic_id), entries,
                              persisted_log_start)
        if not view.holes:
            break
    return view


def segments_holding(store: ObjectStore, namespace: str, topic: str, partition: int,
                     first: int, last: int) -> list[str]:
    """Keys of the segments that hold offsets ``first..last`` now (for a piece deleted since
    planning: an entry compacted, or a segment merged into an earlier one); [] if none do."""
    view = partition_view(list_segments(store, namespace, topic, partition), ())
    if not view.holds(first, last):
        return []
    return [piece.key for piece in view.pieces if piece.base_offset <= last and piece.last_offset >= first]


def pieces_for(pieces: tuple[Piece, ...], start: int, end: int) -> tuple[Piece, ...]:
    """The pieces holding offsets in ``[start, end)``."""
    return tuple(p for p in pieces if p.base_offset < end and p.last_offset >= start)


def _resolve(wanted: int | dict, topic: str, partition: int, snap: PartitionView, name: str) -> int:
    offset = wanted if isinstance(wanted, int) else wanted.get(topic, {}).get(partition, LATEST if name == "end" else EARLIEST)
    if offset == EARLIEST:
        return snap.log_start
    if offset == LATEST:
        return snap.high_watermark
    return offset


def plan(store: ObjectStore, options: ReadOptions) -> list[PartitionRange]:
    entries = LogEntries(store, options.namespace)  # before the segments: see the module's docstring
    topics = _topics(store, options.namespace)
    ranges = []
    for topic in sorted(topics):
        if not options.topic_matches(topic):
            continue
        info = topics[topic]
        count = int(info["partitions"])
        partitions = options.assign[topic] if options.assign is not None else tuple(range(count))
        for partition in partitions:
            if not 0 <= partition < count:
                raise OptionError(f"topic {topic} has no partition {partition}")
            log_start = int(info.get("log_start", {}).get(str(partition), 0))
            snap = snapshot(store, options.namespace, topic, partition, log_start,
                            entries.of(topic, partition, info.get("id")), info.get("id"))
            start = _resolve(options.starting, topic, partition, snap, "start")
            end = min(_resolve(options.ending, topic, partition, snap, "end"), snap.high_watermark)
            if options.starting_timestamp is not None:
                wanted = _timestamp_for(options.starting_timestamp, topic, partition)
                if wanted is not None:
                    found = offset_for_timestamp(store, snap, wanted)
                    if found is None:  # as Spark's Kafka source (strategy "error")
                        raise OptionError(f"no record in {topic}-{partition} has a timestamp >= {wanted}")
                    start = found
            if options.ending_timestamp is not None:
                wanted = _timestamp_for(options.ending_timestamp, topic, partition)
                if wanted is not None:
                    found = offset_for_timestamp(store, snap, wanted)
                    end = snap.high_watermark if found is None else found
            if start < snap.log_start:
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{topic}-{partition}: offsets {start}..{snap.log_start - 1} are no longer stored "
                        f"(log start {snap.log_start}); set failOnDataLoss=false to read from the log start")
                start = snap.log_start
            if start >= end:
                continue
            ranges.append(PartitionRange(topic, partition, start, end, pieces_for(snap.pieces, start, end)))
    if options.subscribe:
        missing = sorted(set(options.subscribe) - set(topics))
        if missing:
            raise OptionError(f"topic(s) {', '.join(missing)} do not exist in {options.path}")
    if options.max_records_per_partition or options.min_partitions:
        ranges = split_ranges(ranges, options.max_records_per_partition, options.min_partitions)
    return ranges


def _timestamp_for(wanted, topic: str, partition: int) -> int | None:
    if isinstance(wanted, int):
        return wanted
    return wanted.get(topic, {}).get(partition)


def offset_for_timestamp(store: ObjectStore, snap: PartitionView, timestamp: int) -> int | None:
    """First offset whose record timestamp is >= ``timestamp`` (as ListOffsets answers), using
    each piece's max timestamp (entries: the directory; segments: the index) to skip pieces."""
    from kafscale.protocol.index import SegmentIndex

    from .rows import load_piece

    for piece in snap.pieces:
        max_timestamp = piece.max_timestamp
        if max_timestamp is None:
            try:
                index = SegmentIndex.decode(store.get(piece.key[: -len(".kfs")] + ".index"))
                max_timestamp = index.max_timestamp if index.describes(piece.size) else None
            except (ObjectNotFound, SegmentFormatError):
                max_timestamp = None  # no usable index: look inside the segment
        if max_timestamp is not None and max_timestamp < timestamp:
            continue
        for data, batches in load_piece(store, piece):
            found = first_record_at(data, batches, timestamp, snap.log_start, snap.high_watermark, skip_control=True)
            if found is not None:
                return found[0]
    return None


def split_ranges(ranges: list[PartitionRange], max_records: int | None, min_partitions: int | None) -> list[PartitionRange]:
    """Split topic-partition ranges so each holds at most ``max_records`` records and there are
    at least ``min_partitions`` of them (Spark's Kafka source options of those names)."""
    pieces: list[PartitionRange] = []
    total = sum(r.end - r.start for r in ranges)
    for part in ranges:
        size = part.end - part.start
        count = 1
        if max_records:
            count = max(count, -(-size // max_records))
        if min_partitions and total and len(ranges) < min_partitions:
            count = max(count, -(-min_partitions * size // total))  # ceiling: at least min_partitions in all
        count = min(count, size)
        step = -(-size // count)
        for first in range(part.start, part.end, step):
            last = min(first + step, part.end)
            pieces.append(PartitionRange(part.topic, part.partition, first, last,
                                         pieces_for(part.pieces, first, last)))
    return pieces
