"""The stored-log readers (:mod:`kafscale.protocol.stored_log`) driven synchronously for Spark,
each step's reads on a thread pool; and the reads executors do: a piece's batches."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kafscale.protocol import stored_log as reads
from kafscale.protocol.catalog import TopicInfo
from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import log_object_namespace, partition_prefix, segment_partition, transaction_state_key
from kafscale.protocol.log_object import LogEntry, read_entry
from kafscale.protocol.log_view import SEGMENT, PartitionView, Piece, entries_by_partition
from kafscale.protocol.records import BatchHeader
from kafscale.protocol.segment import read_segment
from kafscale.protocol.stored_log import MISSING, ListObjects, Read, Reader, ReadObject, ReadRange
from kafscale.protocol.transactions import AbortedTxn, PartitionTransactions
from kafscale.storage_backends import ObjectNotFound, ObjectStore

__all__ = ["read", "LogEntries", "snapshot", "load_piece", "DataLossError", "CorruptSegmentError", "Readable",
           "readable"]

T = TypeVar("T")

_READS_IN_FLIGHT = 16


class DataLossError(RuntimeError):
    """Requested offsets are no longer stored (retention or DeleteRecords removed them)."""


class CorruptSegmentError(RuntimeError):
    """A segment object failed validation; nothing from it is returned."""


def read(store: ObjectStore, reader: Reader[T]) -> T:
    """Run ``reader`` against ``store`` (torn segments are skipped: never acknowledged)."""
    answers: list[Any] | None = None
    pool: ThreadPoolExecutor | None = None
    try:
        while True:
            try:
                step = reader.send(answers)  # type: ignore[arg-type]  # None starts a generator
            except StopIteration as done:
                return done.value
            if len(step) == 1:
                answers = [_perform(store, step[0])]
            else:
                pool = pool or ThreadPoolExecutor(_READS_IN_FLIGHT)
                answers = list(pool.map(lambda request: _perform(store, request), step))
    finally:
        if pool is not None:
            pool.shutdown()


def _perform(store: ObjectStore, request: Read) -> Any:
    if isinstance(request, ListObjects):
        return [(info.key, info.size) for info in store.list(request.prefix)]
    if isinstance(request, ReadRange):
        try:
            return store.get_range(request.key, request.start, request.end)
        except ObjectNotFound:
            return MISSING
    if isinstance(request, ReadObject):
        try:
            return store.get(request.key)
        except ObjectNotFound:
            return MISSING
    return []  # RepairTorn: only the partition's owner repairs


class LogEntries:
    """Every partition's entries in the shared log objects, read once per plan."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        listed = read(store, reads.list_log_objects(namespace))
        found = read(store, reads.gather(reads.read_directory(key, size) for key, size in listed))
        # None: deleted since the listing (compacted); SegmentFormatError: torn, never acknowledged.
        self._entries = entries_by_partition(d for d in found if d is not None and not isinstance(d, SegmentFormatError))

    def of(self, topic: TopicInfo, partition: int) -> list[LogEntry]:
        wanted = topic.topic_id.bytes
        return [e for e in self._entries.get((topic.name, partition), ()) if e.topic_id == wanted]


# Within one incarnation of a topic (its id), a segment key at one size always holds the same
# batches (a merge adds batches, so it changes the size): last offsets read from footers are
# kept by (store, topic id, key, size) across plans (a streaming query plans every micro-batch).
_LAST_OFFSETS: dict[tuple[str, str, str, int], int] = {}
_LAST_OFFSETS_KEPT = 100_000


def snapshot(store: ObjectStore, namespace: str, topic: TopicInfo, partition: int,
             entries: list[LogEntry]) -> PartitionView:
    """The partition's view over its segments and ``entries`` (listed before the segments)."""
    where, topic_id = store.describe(), str(topic.topic_id)
    view = read(store, reads.snapshot(partition_prefix(namespace, topic.name, partition), entries,
                                      topic.log_start.get(partition, 0),
                                      lambda key, size: _LAST_OFFSETS.get((where, topic_id, key, size))))
    if len(_LAST_OFFSETS) >= _LAST_OFFSETS_KEPT:
        _LAST_OFFSETS.clear()
    for piece in view.pieces:
        if piece.kind == SEGMENT:
            _LAST_OFFSETS[(where, topic_id, piece.key, piece.size)] = piece.last_offset
    return view


@dataclass(frozen=True)
class Readable:
    """How far a reader may read a partition: the high watermark, or under read_committed
    the last stable offset; and the aborted transactions whose batches it drops."""

    latest: int
    aborted: tuple[AbortedTxn, ...] = ()


def readable(store: ObjectStore, namespace: str, topic: str, partition: int, snap: PartitionView,
             read_committed: bool) -> Readable:
    """From the partition's stored transaction state (its owner writes it before a
    transaction's first batch there is acknowledged, and after each marker): nothing of a
    transaction still open, and every aborted one, is read under read_committed."""
    if not read_committed:
        return Readable(snap.high_watermark)
    key = transaction_state_key(namespace, topic, partition)
    try:
        state = PartitionTransactions.decode(store.get(key))
    except ObjectNotFound:
        return Readable(snap.high_watermark)  # no transaction ever wrote here
    except ValueError as exc:
        raise CorruptSegmentError(f"{key} is unreadable ({exc}): read_committed cannot tell aborted records") \
            from exc
    stable = max(state.last_stable_offset(snap.high_watermark), snap.log_start)
    return Readable(stable, tuple(e for e in state.aborted if e.last_offset >= snap.log_start))


def _segment(store: ObjectStore, key: str) -> tuple[bytes | memoryview, list[BatchHeader]]:
    segment = read_segment(store.get_view(key))
    return segment.data, segment.batches


def load_piece(store: ObjectStore, piece: Piece, start: int | None = None,
               end: int | None = None) -> Iterator[tuple[bytes | memoryview, list[BatchHeader]]]:
    """A piece's bytes and batches; of a segment only the span holding ``[start, end)`` where
    its index says where that is. A piece deleted since planning (an entry compacted, a
    segment merged into an earlier one) is read from the segments that now hold its offsets."""
    entry = piece.entry
    if entry is None and start is not None and end is not None:
        span = read(store, reads.segment_span(piece, start, end))
        if isinstance(span, tuple):  # else LOAD_WHOLE
            yield span
            return
    try:
        if entry is None:
            yield _segment(store, piece.key)
        else:
            stored = read_entry(entry, store.get_range(piece.key, entry.position, entry.position + entry.length))
            yield stored.data, stored.batches
        return
    except ObjectNotFound:
        pass
    except SegmentFormatError as exc:
        raise CorruptSegmentError(f"{piece.key} is corrupt: {exc}") from exc
    namespace, topic, partition = _partition_of(piece)
    holding = read(store, reads.segments_holding(partition_prefix(namespace, topic, partition),
                                                  piece.base_offset, piece.last_offset))
    if not holding:
        raise DataLossError(f"{piece.key} was deleted after planning and its offsets "
                            f"{piece.base_offset}..{piece.last_offset} are in no segment (retention?)")
    for segment in holding:
        try:
            yield _segment(store, segment.key)
        except ObjectNotFound:
            raise DataLossError(f"{segment.key} was deleted while it was read (retention?)") from None
        except SegmentFormatError as exc:
            raise CorruptSegmentError(f"segment {segment.key} is corrupt: {exc}") from exc


def _partition_of(piece: Piece) -> tuple[str, str, int]:
    if piece.entry is not None:
        namespace = log_object_namespace(piece.key)
        if namespace is None:
            raise CorruptSegmentError(f"{piece.key} is not a log object key")
        return namespace, piece.entry.topic, piece.entry.partition
    parsed = segment_partition(piece.key)
    if parsed is None:
        raise CorruptSegmentError(f"{piece.key} is not a segment key")
    return parsed
