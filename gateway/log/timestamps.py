"""ListOffsets by timestamp over a partition's pieces: the first record at or after a time
(-1 … n), and the record with the greatest timestamp (-3)."""

from __future__ import annotations

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.index import SegmentIndex, build_index
from kafscale.protocol.log_view import SEGMENT, Piece, first_record_at
from kafscale.protocol.records import iter_records
from kafscale.storage_backends import StorageError

from .partition_log import PartitionLog
from .stored_log import read_stored

__all__ = ["offset_for_timestamp", "max_timestamp_offset", "max_timestamp"]


async def max_timestamp(partition_log: PartitionLog, piece: Piece) -> int:
    """A piece's greatest timestamp: in the directory for entries, from the index (or the
    segment itself, if the index is missing) for segments; remembered per segment."""
    if piece.max_timestamp is not None:
        return piece.max_timestamp
    known = partition_log.segment_max_timestamps.get(piece.cache_key)
    if known is None:
        index = await _segment_index(partition_log, piece)
        if index is not None:
            return index.max_timestamp
        known = build_index((await partition_log.load_piece(piece)).batches).max_timestamp
        partition_log.remember_max_timestamp(piece, known)
    return known


async def _segment_index(partition_log: PartitionLog, piece: Piece) -> SegmentIndex | None:
    """The segment's usable sparse index (its greatest timestamp remembered), or ``None``."""
    try:
        index = await read_stored(partition_log.store, reads.segment_index(piece))
    except StorageError:
        return None  # derived data: the segment itself still answers
    if index is not None:
        partition_log.remember_max_timestamp(piece, index.max_timestamp)
    return index


async def offset_for_timestamp(partition_log: PartitionLog, timestamp: int) -> tuple[int, int] | None:
    """First (offset, timestamp) whose timestamp is ``>= timestamp``, or ``None``. A segment
    not in the cache is searched through its sparse index, read once (its greatest timestamp
    and the one span needed, not the whole segment); the rest is loaded through the cache."""
    low, high = partition_log.log_start_offset, partition_log.high_watermark
    for piece in partition_log.pieces_from(low):
        known = piece.max_timestamp if piece.max_timestamp is not None else \
            partition_log.segment_max_timestamps.get(piece.cache_key)
        if known is not None and known < timestamp:
            continue
        found = reads.LOAD_WHOLE
        if piece.kind == SEGMENT and not partition_log.cached(piece):
            index = await _segment_index(partition_log, piece)
            if index is not None:
                try:  # None when no span reaches the timestamp
                    found = await read_stored(partition_log.store,
                                                  reads.first_in_spans(piece, index, timestamp, low, high))
                except StorageError as exc:
                    raise KafkaError(ErrorCode.kafka_storage_error, f"reading {piece.key}: {exc}") from exc
        if found is reads.LOAD_WHOLE:
            loaded = await partition_log.load_piece(piece)
            found = first_record_at(loaded.data, loaded.batches, timestamp, low, high)
        if found is not None:
            return found
    return None


async def max_timestamp_offset(partition_log: PartitionLog) -> tuple[int, int] | None:
    """(offset, timestamp) of the record with the greatest timestamp (ListOffsets -3)."""
    best: tuple[int, Piece] | None = None
    for piece in partition_log.pieces_from(partition_log.log_start_offset):
        stamp = await max_timestamp(partition_log, piece)
        if best is None or stamp > best[0]:
            best = (stamp, piece)
    if best is None:
        return None
    loaded = await partition_log.load_piece(best[1])
    for batch in loaded.batches:
        if batch.max_timestamp == best[0]:
            for record in iter_records(loaded.data, batch):
                if record.timestamp == best[0]:
                    return record.offset, record.timestamp
    return None
