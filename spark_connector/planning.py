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

from dataclasses import dataclass

from kafscale.protocol import stored_log as reads
from kafscale.protocol.catalog import TopicInfo, catalog_prefix, decode_catalog, newest_catalog_key
from kafscale.protocol.layout import topics_key
from kafscale.protocol.log_view import PartitionView, Piece, first_record_at
from kafscale.protocol.transactions import AbortedTxn, aborted_overlapping
from kafscale.storage_backends import ObjectNotFound, ObjectStore

from .options import EARLIEST, LATEST, OptionError, ReadOptions
from .pushdown import NO_BOUNDS, Bounds
from .stored_log import DataLossError, LogEntries, Readable, load_piece, read, readable, snapshot

__all__ = ["PartitionRange", "partition_range", "plan", "read_catalog", "pieces_for", "timestamp_for",
           "offset_for_timestamp", "starting_at_timestamp"]


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # one past the last offset to read
    pieces: tuple[Piece, ...]
    aborted: tuple[AbortedTxn, ...] = ()  # read_committed: their batches are dropped


def partition_range(topic: str, partition: int, start: int, end: int, pieces: tuple[Piece, ...],
                    allowed: Readable) -> PartitionRange:
    """The range ``[start, end)`` with the pieces and aborted transactions it needs."""
    return PartitionRange(topic, partition, start, end, pieces_for(pieces, start, end),
                          tuple(aborted_overlapping(allowed.aborted, start, end)))


def read_catalog(store: ObjectStore, namespace: str) -> dict[str, TopicInfo]:
    """The topic catalog: a cluster's newest mirror of etcd's, or a lone gateway's document."""
    key = newest_catalog_key([info.key for info in store.list(catalog_prefix(namespace))]) or topics_key(namespace)
    try:
        return decode_catalog(store.get(key))[0]
    except ObjectNotFound:
        return {}


def pieces_for(pieces: tuple[Piece, ...], start: int, end: int) -> tuple[Piece, ...]:
    """The pieces holding offsets in ``[start, end)``."""
    return tuple(p for p in pieces if p.base_offset < end and p.last_offset >= start)


def _resolve(wanted: int | dict, topic: str, partition: int, snap: PartitionView, latest: int, name: str) -> int:
    offset = wanted if isinstance(wanted, int) else wanted.get(topic, {}).get(partition, LATEST if name == "end" else EARLIEST)
    if offset == EARLIEST:
        return snap.log_start
    if offset == LATEST:
        return latest
    return offset


def plan(store: ObjectStore, options: ReadOptions, bounds: Bounds = NO_BOUNDS) -> list[PartitionRange]:
    """The ranges to read; ``bounds`` (pushed filters) prune partitions and offsets first."""
    entries = LogEntries(store, options.namespace)  # before the segments: see the module's docstring
    topics = read_catalog(store, options.namespace)
    ranges = []
    for topic in sorted(topics):
        if not options.topic_matches(topic):
            continue
        info = topics[topic]
        count = info.partitions
        partitions = options.assign[topic] if options.assign is not None else tuple(range(count))
        for partition in partitions:
            if not 0 <= partition < count:
                raise OptionError(f"topic {topic} has no partition {partition}")
            if not bounds.allows(partition):
                continue
            snap = snapshot(store, options.namespace, info, partition, entries.of(info, partition))
            allowed = readable(store, options.namespace, topic, partition, snap, options.read_committed)
            start = _resolve(options.starting, topic, partition, snap, allowed.latest, "start")
            end = min(_resolve(options.ending, topic, partition, snap, allowed.latest, "end"), allowed.latest)
            start = starting_at_timestamp(store, options, topic, partition, snap, allowed.latest, start)
            if options.ending_timestamp is not None:
                wanted = timestamp_for(options.ending_timestamp, topic, partition)
                if wanted is not None:
                    found = offset_for_timestamp(store, snap, wanted)
                    end = allowed.latest if found is None else min(found, allowed.latest)
            start, end = bounds.clip(start, end)
            if bounds.earliest_timestamp_ms is not None and start < end:
                found = offset_for_timestamp(store, snap, bounds.earliest_timestamp_ms)
                start = end if found is None else max(start, found)
            if start < snap.log_start:
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{topic}-{partition}: offsets {start}..{snap.log_start - 1} are no longer stored "
                        f"(log start {snap.log_start}); set failOnDataLoss=false to read from the log start")
                start = snap.log_start
            if start >= end:
                continue
            ranges.append(partition_range(topic, partition, start, end, snap.pieces, allowed))
    if options.subscribe:
        missing = sorted(set(options.subscribe) - set(topics))
        if missing:
            hint = "" if topics else (
                f": no topic at all is stored there under namespace {options.namespace!r}; is {options.path!r} "
                "the gateway's --storage, and the namespace its --namespace (option 'namespace')?")
            raise OptionError(f"topic(s) {', '.join(missing)} do not exist in {options.path}{hint}")
    if options.max_records_per_partition or options.min_partitions:
        ranges = split_ranges(ranges, options.max_records_per_partition, options.min_partitions)
    return ranges


def starting_at_timestamp(store: ObjectStore, options: ReadOptions, topic: str, partition: int, snap: PartitionView,
                          latest: int, otherwise: int) -> int:
    """Where a starting timestamp option starts this partition (``otherwise`` without one):
    the first record at or after it; with none, as startingOffsetsByTimestampStrategy says."""
    wanted = timestamp_for(options.starting_timestamp, topic, partition) \
        if options.starting_timestamp is not None else None
    if wanted is None:
        return otherwise
    found = offset_for_timestamp(store, snap, wanted)
    if found is not None:
        return min(found, latest)
    if options.no_record_at_timestamp_fails:
        raise OptionError(f"no record in {topic}-{partition} has a timestamp >= {wanted} (set "
                          "startingOffsetsByTimestampStrategy=latest to start such partitions at their latest offset)")
    return latest


def timestamp_for(wanted: int | dict, topic: str, partition: int) -> int | None:
    """The timestamp an option asks for this partition (one for all, or per partition)."""
    if isinstance(wanted, int):
        return wanted
    return wanted.get(topic, {}).get(partition)


def offset_for_timestamp(store: ObjectStore, snap: PartitionView, timestamp: int) -> int | None:
    """First offset whose record timestamp is >= ``timestamp`` (as ListOffsets answers):
    entries are skipped by their directory's max timestamp; segments are searched through
    their sparse index (one span read) where they have one, else read whole."""
    low, high = snap.log_start, snap.high_watermark
    for piece in snap.pieces:
        if piece.max_timestamp is not None and piece.max_timestamp < timestamp:
            continue
        found = read(store, reads.first_at_timestamp(piece, timestamp, low, high, skip_control=True))
        if found is reads.LOAD_WHOLE:
            found = next((hit for data, batches in load_piece(store, piece)
                          if (hit := first_record_at(data, batches, timestamp, low, high, skip_control=True))
                          is not None), None)
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
                                         pieces_for(part.pieces, first, last),
                                         tuple(aborted_overlapping(part.aborted, first, last))))
    return pieces
