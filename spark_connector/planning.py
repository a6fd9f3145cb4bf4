"""Planning on the driver: a consistent, committed snapshot of each partition to read.

Only what a gateway has acknowledged is read: segments are listed, the last one's
footer gives the high watermark (a torn last object is ignored, as the gateway
ignores it), and the log start is the first segment or the one DeleteRecords
persisted in the topic metadata, whichever is later. Each input partition carries
the segment keys and sizes executors need, so executors never list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import parse_segment_key, partition_prefix, topics_key
from kafscale.protocol.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    parse_segment_footer,
    parse_segment_header,
)
from kafscale.storage_backends import ObjectNotFound, ObjectStore

from .options import EARLIEST, LATEST, OptionError, ReadOptions

__all__ = ["SegmentSpan", "PartitionRange", "plan", "DataLossError"]


class DataLossError(RuntimeError):
    """Requested offsets are no longer stored (retention or DeleteRecords removed them)."""


@dataclass(frozen=True)
class SegmentSpan:
    key: str
    base_offset: int
    size: int


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # one past the last offset to read
    segments: tuple[SegmentSpan, ...]


@dataclass(frozen=True)
class _Snapshot:
    log_start: int
    high_watermark: int
    segments: tuple[SegmentSpan, ...]


def _topics(store: ObjectStore, namespace: str) -> dict[str, dict]:
    try:
        document = json.loads(store.get(topics_key(namespace)))
    except ObjectNotFound:
        return {}
    return document.get("topics", {})


def _last_offset(store: ObjectStore, key: str, size: int) -> int | None:
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    try:
        header = parse_segment_header(store.get_range(key, 0, SEGMENT_HEADER_SIZE))
        footer = parse_segment_footer(store.get_range(key, size - SEGMENT_FOOTER_SIZE, size))
    except SegmentFormatError:
        return None
    return footer.last_offset if footer.last_offset >= header.base_offset else None


def snapshot(store: ObjectStore, namespace: str, topic: str, partition: int, persisted_log_start: int) -> _Snapshot:
    found = sorted(
        (base, info.key, info.size)
        for info in store.list(partition_prefix(namespace, topic, partition))
        if (base := parse_segment_key(info.key)) is not None
    )
    high_watermark = 0
    while found:
        last = _last_offset(store, found[-1][1], found[-1][2])
        if last is not None:
            high_watermark = last + 1
            break
        found.pop()  # torn: never acknowledged, never served
    spans = tuple(SegmentSpan(key, base, size) for base, key, size in found)
    log_start = max(spans[0].base_offset if spans else 0, persisted_log_start)
    return _Snapshot(min(log_start, high_watermark), high_watermark, spans)


def spans_for(segments: tuple[SegmentSpan, ...], start: int, end: int) -> tuple[SegmentSpan, ...]:
    """The segments holding offsets in ``[start, end)`` (a segment ends where the next begins)."""
    return tuple(
        span for i, span in enumerate(segments)
        if span.base_offset < end and (i + 1 == len(segments) or segments[i + 1].base_offset > start)
    )


def _resolve(wanted: int | dict, topic: str, partition: int, snap: _Snapshot, name: str) -> int:
    offset = wanted if isinstance(wanted, int) else wanted.get(topic, {}).get(partition, LATEST if name == "end" else EARLIEST)
    if offset == EARLIEST:
        return snap.log_start
    if offset == LATEST:
        return snap.high_watermark
    return offset


def plan(store: ObjectStore, options: ReadOptions) -> list[PartitionRange]:
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
            snap = snapshot(store, options.namespace, topic, partition, log_start)
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
            ranges.append(PartitionRange(topic, partition, start, end, spans_for(snap.segments, start, end)))
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


def offset_for_timestamp(store: ObjectStore, snap: _Snapshot, timestamp: int) -> int | None:
    """First offset whose record timestamp is >= ``timestamp`` (as ListOffsets answers),
    using each segment's index for its max timestamp and decoding one batch only."""
    from kafscale.protocol.index import SegmentIndex
    from kafscale.protocol.records import iter_records
    from kafscale.protocol.segment import read_segment

    for span in snap.segments:
        index_key = span.key[: -len(".kfs")] + ".index"
        try:
            max_timestamp = SegmentIndex.decode(store.get(index_key)).max_timestamp
        except (ObjectNotFound, SegmentFormatError):
            max_timestamp = None  # no usable index: look inside the segment
        if max_timestamp is not None and max_timestamp < timestamp:
            continue
        segment = read_segment(store.get(span.key))
        for batch in segment.batches:
            if batch.max_timestamp < timestamp or batch.is_control:
                continue
            for record in iter_records(segment.data, batch):
                if record.timestamp >= timestamp and snap.log_start <= record.offset < snap.high_watermark:
                    return record.offset
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
                                         spans_for(part.segments, first, last)))
    return pieces
