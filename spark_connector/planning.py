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
            if start < snap.log_start:
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{topic}-{partition}: offsets {start}..{snap.log_start - 1} are no longer stored "
                        f"(log start {snap.log_start}); set failOnDataLoss=false to read from the log start")
                start = snap.log_start
            if start >= end:
                continue
            spans = tuple(
                span for i, span in enumerate(snap.segments)
                if span.base_offset < end
                and (i + 1 == len(snap.segments) or snap.segments[i + 1].base_offset > start)
            )
            ranges.append(PartitionRange(topic, partition, start, end, spans))
    if options.subscribe:
        missing = sorted(set(options.subscribe) - set(topics))
        if missing:
            raise OptionError(f"topic(s) {', '.join(missing)} do not exist in {options.path}")
    return ranges
