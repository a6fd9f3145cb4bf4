"""Compaction: entries in shared log objects become per-partition Kafscale segments; the
janitor deletes log objects once nothing in them is needed.

- The owner of a partition compacts it, in offset order, from its compacted end:
  when its entries reach ``compaction_min_bytes`` (or ``segment.bytes``, if smaller)
  or the oldest is ``compaction_delay_ms`` old. A segment under ``INDEX_MIN_BYTES``
  gets no index object: it is read whole anyway, and the index would be a second PUT.
  A segment is created put-if-absent at its base offset; if that key exists
  (an earlier run killed after its PUT, or a former owner), the stored segment is
  taken as written — it holds the same batches, since no offset is ever claimed
  twice. So compaction is idempotent and resumable, and needs no coordination.
- A gateway's janitor deletes its own writers' log objects (this run's and its
  earlier runs'; the controller also those of gateways that are gone) once every
  entry is compacted, below the log start, or of a deleted topic. Only slots a
  writer has passed go (a seal ahead of it stays until it meets it), never its
  newest (where seals go after). A seal of every partition stays for good: it is where
  a dead writer's sequence ends, and a PUT of that writer held in the network for any
  time still finds the slot taken (no clock decides when it could be safe to delete).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import KafkaError
from kafscale.protocol.index import build_index
from kafscale.protocol.layout import index_key, partition_prefix, segment_key, writer_node
from kafscale.protocol.log_object import LogEntry
from kafscale.protocol.log_view import SEGMENT, PartitionView, Piece, partition_view
from kafscale.protocol.segment import Segment, SegmentBuilder, parse_segment_footer, parse_segment_header
from kafscale.storage_backends import ObjectExists, StorageError

from ..config import GatewayConfig
from ..maintenance import MaintenanceFailures, every
from ..metadata import TopicInfo
from ..ownership import Ownership
from ..storage import AsyncStore
from .damage import DamageReport
from .log_objects import LogObjects
from .log_writer import LogWriter
from .merging import INDEX_MIN_BYTES, delete_redundant, merge
from .partition_log import PartitionLog
from .segments import list_segments
from .stored_log import read_stored

__all__ = ["compact", "Compactor"]

log = logging.getLogger("kafscale.compaction")

COLLECT_INTERVAL_S = 10.0


def due(partition_log: PartitionLog, now: float) -> bool:
    if partition_log.uncompacted_since is None or partition_log.closing or partition_log.fenced:
        return False
    settings = partition_log.settings
    if partition_log.uncompacted_bytes >= min(settings.segment_bytes, settings.compaction_min_bytes):
        return True
    # Quiet partitions wait the longest: each segment is a PUT, so the store's request rate
    # follows the bytes produced, not the number of partitions.
    return now - partition_log.uncompacted_since >= settings.compaction_delay_ms / 1000


async def compact(partition_log: PartitionLog) -> int:
    """Write the partition's oldest entries (up to segment.bytes) as one segment; returns
    the number of offsets compacted (0 if nothing was due or the partition moved)."""
    async def step() -> int:
        start = partition_log.compacted_end
        chosen: list[Piece] = []
        size = 0
        for piece in partition_log.entry_pieces():
            if piece.last_offset < start:
                continue
            if chosen and size + piece.size > partition_log.settings.segment_bytes:
                break
            if chosen and piece.base_offset > chosen[-1].last_offset + 1:
                break  # offsets lost with a damaged log object: the next segment starts after them
            chosen.append(piece)
            size += piece.size
        if not chosen:
            partition_log.nothing_to_compact()
            return 0
        builder: SegmentBuilder | None = None
        limit = partition_log.settings.segment_bytes
        for piece in chosen:
            loaded = await partition_log.load_piece(piece, keep=False)  # copied, then dropped
            for batch in loaded.batches:
                if batch.last_offset < start:
                    continue
                if builder is None:
                    # Damaged batches at ``start`` (reported when read) stay lost: the segment
                    # starts after them, and readers answer CORRUPT_MESSAGE there.
                    builder = SegmentBuilder(batch.base_offset)
                elif builder.body_size + batch.size > limit or batch.base_offset != builder.next_offset:
                    break  # full, or damaged batches next: the rest goes in the next segment
                builder.append(loaded.batch_bytes(batch), [batch.at(position=0)])
                start = batch.last_offset + 1
            else:
                continue
            break
        if builder is None or not partition_log.writable() or partition_log.fenced:
            return 0
        settings = partition_log.settings
        key = segment_key(settings.namespace, partition_log.topic, partition_log.partition, builder.base_offset)
        # The CRC of up to segment.bytes, off the event loop (crc32c releases the GIL).
        data = await trio.to_thread.run_sync(builder.seal, partition_log.clock.now_ms())
        store = partition_log.store
        try:
            await store.put_if_absent(key, data)
        except ObjectExists:
            # Written before (a run killed after its PUT, or a former owner): the same batches.
            info = await store.head(key)
            found = await read_stored(store, reads.segment_end(key, builder.base_offset, info.size)) if info else None
            if info is None or found is None:
                log.error("segment %s exists but is unreadable; compaction of %s-%d stops here",
                          key, partition_log.topic, partition_log.partition)
                return 0
            segment = Piece(SEGMENT, key, builder.base_offset, found, info.size)
            max_timestamp = None
        else:
            segment = Piece(SEGMENT, key, builder.base_offset, builder.next_offset - 1, len(data))
            index = build_index(builder.batches, settings.index_interval, len(data))
            max_timestamp = index.max_timestamp
            partition_log.cache.put(segment.cache_key, Segment(parse_segment_header(data), parse_segment_footer(data),
                                                               data, builder.batches), len(data))
            if len(data) >= INDEX_MIN_BYTES:
                try:  # derived data, rebuilt from the segment if lost: not on the durable path
                    await store.put(index_key(settings.namespace, partition_log.topic, partition_log.partition,
                                              builder.base_offset), index.encode(), durable=False)
                except StorageError as exc:
                    log.warning("writing the index of %s failed (rebuilt on demand): %s", key, exc)
        partition_log.compacted_into(segment, max_timestamp)
        last = segment.last_offset
        log.debug("compacted %s-%d offsets %d..%d into %s", partition_log.topic, partition_log.partition,
                  segment.base_offset, last, key)
        return last + 1 - segment.base_offset

    return await partition_log.maintain(step)


class ServedLogs(Protocol):
    """What the compactor needs of the log manager that runs it."""

    config: GatewayConfig
    store: AsyncStore
    objects: LogObjects
    writer: LogWriter
    ownership: Ownership
    damage: DamageReport

    def topics(self) -> dict[str, TopicInfo]: ...
    def loaded(self) -> list[PartitionLog]: ...
    def loaded_log(self, topic: str, partition: int) -> PartitionLog | None: ...
    async def get(self, topic: str, partition: int) -> PartitionLog: ...


class Compactor:
    """Compacts the partitions this gateway serves and deletes what is compacted."""

    def __init__(self, logs: ServedLogs, failures: MaintenanceFailures, check_interval_s: float = 1.0,
                 time_share: float = 1.0) -> None:
        self.logs = logs
        self.failures = failures
        self.check_interval_s = check_interval_s
        # After a segment that took t seconds, pause t * (1 / share - 1): compaction takes at
        # most this share of the gateway's time (wall time: its reads and writes count too).
        self.time_share = time_share
        self.errors = 0
        self._collected_at = float("-inf")
        self.segments_written = 0
        self.segments_merged = 0
        self.objects_deleted = 0

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await every(self.check_interval_s, "compaction", self.pass_once, self.failures)

    async def pass_once(self, *, everything: bool = False) -> None:
        """Compact every partition that is due (``everything``: all there is), then collect
        (at most every ``COLLECT_INTERVAL_S``: collecting lists the segments of partitions
        other gateways compact)."""
        now = trio.current_time()
        for partition_log in self.logs.loaded():
            while everything or due(partition_log, now):
                if not await self._step(compact, partition_log, everything):
                    break
                self.segments_written += 1
            if partition_log.redundant:
                await self._step(delete_redundant, partition_log, everything)
            while merged := await self._step(merge, partition_log, everything):
                self.segments_merged += merged
        if everything or now - self._collected_at >= COLLECT_INTERVAL_S:
            self._collected_at = now
            await self.collect()

    async def _step(self, job, partition_log: PartitionLog, everything: bool) -> int:
        """One bounded piece of work on a partition, then a pause that keeps the compactor
        within its share of time; 0 when there was nothing to do or it failed."""
        started = trio.current_time()
        done = 0
        with self.failures.guard(job.__name__, f"{partition_log.topic}-{partition_log.partition}") as outcome:
            done = await job(partition_log)
        if outcome.failed:
            self.errors += 1
            return 0
        if done:
            if everything:
                await trio.lowlevel.checkpoint()
            else:
                await trio.sleep((trio.current_time() - started) * (1 / self.time_share - 1))
        return done

    async def collect(self) -> None:
        """Delete this node's log objects whose every entry is settled; load the partitions
        this gateway owns that still have entries to compact (after a restart)."""
        objects = self.logs.objects
        node = self.logs.ownership.node_id
        own = self.logs.writer.writer_id
        ownership = self.logs.ownership
        live = {broker.node_id for broker in ownership.brokers()}
        # Writers of gateways that are gone are collected by the controller.
        orphans_too = ownership.controller_id() == node
        held: dict[tuple[str, int], tuple[PartitionView, int]] = {}
        doomed: list[str] = []
        damaged = self.logs.damage.names_object
        for writer, directories in objects.writers().items():
            if writer == own:
                # Only slots this writer has passed, and never its newest: a seal ahead of it must
                # stay until it collides with it, and the newest slot is where seals go after.
                passed = self.logs.writer.sequence - 1
                candidates = [d for d in directories if d.sequence < passed]
            else:
                if writer_node(writer) != node and not (orphans_too and writer_node(writer) not in live):
                    continue
                sealed = next((d for d in directories if d.seals_all), None)
                if sealed is None:
                    continue  # not fenced yet: its next slots may still be written
                # The seal itself stays: deleting it would let a late PUT of that writer land.
                candidates = [d for d in directories if d.sequence < sealed.sequence]
            for checked, directory in enumerate(candidates):
                if checked % 256 == 255:
                    await trio.lowlevel.checkpoint()  # thousands wait after a burst: let requests in
                if damaged(directory.key):
                    continue  # kept for inspection (its lost offsets are reported, and stay lost)
                if directory.entries and not directory.is_seal:
                    settled = True
                    for entry in directory.entries:
                        if not await self._settled(entry, held):
                            settled = False
                            break
                    if not settled:
                        continue
                doomed.append(directory.key)
        # One request per 1,000 keys (an S3 DeleteObjects POST is billed; one each was as
        # many billed requests as log objects written).
        await self.logs.store.delete_many(doomed)
        for key in doomed:
            objects.forget(key)
        self.objects_deleted += len(doomed)

    async def _settled(self, entry: LogEntry, held: dict[tuple[str, int], tuple[PartitionView, int]]) -> bool:
        info = self.logs.topics().get(entry.topic)
        if info is None or entry.partition >= info.partitions or info.topic_id.bytes != entry.topic_id:
            return True  # the topic (this incarnation of it) is gone
        unit = (entry.topic, entry.partition)
        partition_log = self.logs.loaded_log(*unit)
        if partition_log is None and self.logs.ownership.owns(*unit):
            try:  # owned but not loaded yet (a restart): load it, so it gets compacted
                partition_log = await self.logs.get(*unit)
            except KafkaError:
                return False
        if partition_log is not None:
            return entry.last_offset < max(partition_log.compacted_end, partition_log.log_start_offset)
        if unit not in held:  # another gateway's partition: what its segments hold
            prefix = partition_prefix(self.logs.config.storage.namespace, *unit)
            held[unit] = (partition_view((await list_segments(self.logs.store, prefix)).segments, ()),
                          info.log_start.get(entry.partition, 0))
        view, log_start = held[unit]
        return entry.last_offset < log_start or view.holds(entry.base_offset, entry.last_offset)
