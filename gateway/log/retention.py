"""Retention: the oldest pieces past retention.ms or beyond retention.bytes go, and
DeleteRecords' log start is applied. The newest piece is kept, as Kafka keeps its
active segment, so the high watermark survives a restart."""

from __future__ import annotations

from .partition_log import PartitionLog
from .timestamps import max_timestamp

__all__ = ["enforce_retention", "delete_before_log_start"]


async def delete_before_log_start(partition_log: PartitionLog) -> int:
    async def step() -> int:
        doomed = [p for p in partition_log.pieces[:-1] if p.last_offset < partition_log.log_start_offset]
        await partition_log.delete_pieces(doomed)
        return len(doomed)

    return await partition_log.maintain(step)


async def enforce_retention(partition_log: PartitionLog, retention_ms: int, retention_bytes: int, now_ms: int) -> int:
    """Delete the oldest pieces past retention.ms (by their newest timestamp) or that keep
    the partition above retention.bytes; returns how many went."""
    async def step() -> int:
        doomed = []
        candidates = partition_log.pieces[:-1]
        if retention_ms >= 0:
            for piece in candidates:
                if await max_timestamp(partition_log, piece) >= now_ms - retention_ms:
                    break
                doomed.append(piece)
        if retention_bytes >= 0:
            size = partition_log.size_bytes - sum(piece.size for piece in doomed)
            for piece in candidates[len(doomed):]:
                if size <= retention_bytes:
                    break
                doomed.append(piece)
                size -= piece.size
        await partition_log.delete_pieces(doomed)
        return len(doomed)

    return await partition_log.maintain(step)


