"""One partition's log: offsets assigned in arrival order, group-committed into segment objects.

Produce requests call :meth:`PartitionLog.append` (synchronous: offsets are
assigned and the bytes re-stamped at once, in arrival order) and then await the
returned :class:`FlushTicket`. A flusher task gathers everything that arrived
within ``linger_ms`` (or ``flush_bytes``) into one segment object, written
put-if-absent at exactly the next base offset, then its index. Only then do
the tickets complete and the high watermark move: acknowledged means durable,
and only durable data is served.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError, SegmentFormatError
from kafscale.protocol.index import SegmentIndex, build_index
from kafscale.protocol.layout import index_key, parse_segment_key, partition_prefix, segment_key
from kafscale.protocol.records import BatchHeader, iter_records, restamp
from kafscale.protocol.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    Segment,
    SegmentBuilder,
    parse_segment_footer,
    parse_segment_header,
    read_segment,
)
from kafscale.storage_backends import ObjectExists, ObjectNotFound, StorageError

from .cache import ByteLRU
from .producers import ProducerStates
from .storage import AsyncStore

__all__ = ["PartitionLog", "FlushTicket", "SegmentRef", "LogSettings"]

log = logging.getLogger("kafscale.log")


@dataclass(frozen=True, slots=True)
class LogSettings:
    namespace: str
    linger_ms: int
    flush_bytes: int
    segment_bytes: int
    index_interval: int
    # Bytes of the newest segments read at recovery to rebuild idempotent-producer state.
    producer_scan_bytes: int = 8 * 2**20


@dataclass(slots=True)
class SegmentRef:
    base_offset: int
    last_offset: int
    key: str
    size: int
    max_timestamp: int | None = None  # None until read from the index


class FlushTicket:
    """Completes when the flush holding an append is durable (or has failed). A flush
    split into several segments can fail part-way: what was written before the failure
    is durable and acknowledged, so the ticket knows where durability ends."""

    __slots__ = ("_done", "error", "durable_end")

    def __init__(self) -> None:
        self._done = trio.Event()
        self.error: KafkaError | None = None
        self.durable_end = 0  # with an error: offsets below this were written all the same

    def finish(self, error: KafkaError | None = None, durable_end: int = 0) -> None:
        self.error = error
        self.durable_end = durable_end
        self._done.set()

    async def wait(self, last_offset: int | None = None) -> None:
        """Return once the append ending at ``last_offset`` is durable; raise if it is not."""
        await self._done.wait()
        if self.error is not None and (last_offset is None or last_offset >= self.durable_end):
            raise self.error


class PartitionLog:
    def __init__(
        self, topic: str, partition: int, store: AsyncStore, settings: LogSettings, cache: ByteLRU,
        *, epoch: int = 0, writable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.topic = topic
        self.partition = partition
        # In a cluster: the leader epoch this log was loaded under, and whether this
        # gateway still owns the partition (asked before every segment write).
        self.epoch = epoch
        self._writable = writable
        self._store = store
        self._settings = settings
        self._cache = cache
        self.prefix = partition_prefix(settings.namespace, topic, partition)
        self.segments: list[SegmentRef] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self._next_offset = 0
        self._pending: list[tuple[bytearray, list[BatchHeader]]] = []
        self._pending_bytes = 0
        self._ticket = FlushTicket()
        self._has_pending = trio.Event()
        self._full = trio.Event()
        self._waiters: set[trio.Event] = set()
        self._closing = False
        self.closed = trio.Event()
        self.flushes = 0
        self.producers = ProducerStates()
        self._index_slots = trio.Semaphore(4)

    # -- recovery --------------------------------------------------------------------------

    def reconfigure(self, settings: LogSettings) -> None:
        """New topic settings (e.g. segment.bytes) apply from the next flush."""
        self._settings = settings

    async def recover(self, persisted_log_start: int = 0) -> None:
        """Rebuild segments, log start and high watermark from storage."""
        listed = await self._store.list(self.prefix)
        found = sorted(
            (base, info.key, info.size)
            for info in listed
            if (base := parse_segment_key(info.key)) is not None
        )
        while found:
            base, key, size = found[-1]
            last = await self._read_last_offset(key, size)
            if last is not None:
                break
            # A torn object was never acknowledged (acks wait for the whole write);
            # move it aside so the offset can be written again.
            log.error("segment %s is torn or corrupt; moving it aside as %s.torn", key, key)
            data = await self._store.get(key)
            await self._store.put(key + ".torn", data)
            await self._store.delete(key)
            found.pop()
        segments = []
        for i, (base, key, size) in enumerate(found):
            last = found[i + 1][0] - 1 if i + 1 < len(found) else await self._read_last_offset(key, size)
            segments.append(SegmentRef(base, last, key, size))
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        if segments:
            self.log_start_offset = segments[0].base_offset
            self.high_watermark = segments[-1].last_offset + 1
        self.log_start_offset = min(max(self.log_start_offset, persisted_log_start), self.high_watermark)
        self._next_offset = self.high_watermark
        await self._rebuild_producer_states()

    async def _rebuild_producer_states(self) -> None:
        """Idempotent producers' recent sequences, from the batches of the newest segments:
        a batch retried after a restart or an ownership move is then recognised as a
        duplicate and answered with its stored offset instead of being written again."""
        newest: list[SegmentRef] = []
        scanned = 0
        for ref in reversed(self.segments):
            if scanned >= self._settings.producer_scan_bytes:
                break
            newest.append(ref)
            scanned += ref.size
        states = ProducerStates()
        stored = FlushTicket()
        stored.finish()
        for ref in reversed(newest):
            try:
                segment = await self.load_segment(ref)
            except KafkaError as exc:  # unreadable: those producers are unknown, as before
                log.warning("cannot rebuild producer state from %s: %s", ref.key, exc)
                continue
            for header in segment.batches:
                states.record(header, stored)
        self.producers = states

    async def _read_last_offset(self, key: str, size: int) -> int | None:
        if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
            return None
        try:
            header = parse_segment_header(await self._store.get_range(key, 0, SEGMENT_HEADER_SIZE))
            footer = parse_segment_footer(await self._store.get_range(key, size - SEGMENT_FOOTER_SIZE, size))
        except SegmentFormatError:
            return None
        if footer.last_offset < header.base_offset:
            return None
        return footer.last_offset

    # -- produce ---------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def append(self, record_set: bytearray, headers: list[BatchHeader]) -> tuple[int, FlushTicket]:
        """Assign offsets to a validated record set and queue it for the next flush.

        A retried batch of an idempotent producer is not appended again: its
        original offset and ticket are returned.
        """
        if self._closing:
            raise KafkaError(ErrorCode.not_leader_or_follower, "partition is shutting down")
        duplicate = self.producers.check(headers[0])
        if duplicate is not None:
            return duplicate.base_offset, duplicate.ticket
        base_offset = self._next_offset
        stamped = restamp(record_set, headers, base_offset)
        self._next_offset = stamped[-1].last_offset + 1
        for header in stamped:
            self.producers.record(header, self._ticket)
        self._pending.append((record_set, stamped))
        self._pending_bytes += len(record_set)
        self._has_pending.set()
        if self._pending_bytes >= self._settings.flush_bytes:
            self._full.set()
        return base_offset, self._ticket

    async def run_flusher(self) -> None:
        """The partition's single writer. Runs until :meth:`close`; flushes what is left."""
        try:
            async with trio.open_nursery() as index_writers:
                await self._flush_loop(index_writers)
        finally:
            self.closed.set()

    async def _write_index(self, key: str, index: bytes) -> None:
        async with self._index_slots:
            try:
                # Not fsync'd: after a crash a lost or torn index is detected and rebuilt.
                await self._store.put(key, index, durable=False)
            except StorageError as exc:
                log.warning("writing index %s failed (it is rebuilt on demand): %s", key, exc)

    async def _flush_loop(self, index_writers: trio.Nursery) -> None:
        while True:
            await self._has_pending.wait()
            if self._settings.linger_ms and not self._closing:
                with trio.move_on_after(self._settings.linger_ms / 1000):
                    await self._full.wait()
            if not self._pending:
                if self._closing:
                    return
                self._has_pending = trio.Event()
                continue
            pending, ticket = self._pending, self._ticket
            self._pending, self._pending_bytes, self._ticket = [], 0, FlushTicket()
            self._has_pending, self._full = trio.Event(), trio.Event()
            with trio.CancelScope(shield=True):  # a write in progress is finished, not abandoned
                try:
                    error, indexes = await self._flush(pending)
                except Exception as exc:  # a bug must fail these requests, not stop the writer
                    log.exception("flushing %s-%d failed", self.topic, self.partition)
                    error, indexes = KafkaError(ErrorCode.unknown_server_error, str(exc)), []
            if error is not None:
                # Segments written before the failure are durable: their appends are
                # acknowledged and their producers' sequences kept, so a retry of them is
                # a duplicate; the rest is failed and forgotten.
                ticket.finish(error, self.high_watermark)
                self.producers.discard_from(self.high_watermark)
                # Later appends assumed this flush's offsets: fail them too and
                # restart numbering at the durable end.
                if self._pending:
                    self._ticket.finish(error, self.high_watermark)
                    self._pending, self._pending_bytes, self._ticket = [], 0, FlushTicket()
                    self._has_pending, self._full = trio.Event(), trio.Event()
                self._next_offset = self.high_watermark
            else:
                ticket.finish()
                self._notify()
            # Indexes are derived data: written beside the next flushes, off the
            # acknowledgement path (a few at a time, so they cannot pile up).
            for key, index in indexes:
                await self._index_slots.acquire()
                self._index_slots.release()
                index_writers.start_soon(self._write_index, key, index)
            if self._closing and not self._pending:
                return

    async def close(self) -> None:
        """Stop taking appends, flush what was accepted, and wait for the flusher."""
        self._closing = True
        self._has_pending.set()
        self._full.set()
        await self.closed.wait()

    async def _flush(
        self, pending: list[tuple[bytearray, list[BatchHeader]]]
    ) -> tuple[KafkaError | None, list[tuple[str, bytes]]]:
        """Write the pending record sets as one or more segments (bounded by segment_bytes).
        Returns the error, if any, and the index objects still to write."""
        builders: list[SegmentBuilder] = []
        builder: SegmentBuilder | None = None
        for record_set, stamped in pending:
            if builder is None or (
                builder.record_count and builder.body_size + len(record_set) > self._settings.segment_bytes
            ):
                builder = SegmentBuilder(stamped[0].base_offset)
                builders.append(builder)
            builder.append(record_set, stamped)
        indexes = []
        for builder in builders:
            error = await self._write_segment(builder)
            if error is not None:
                return error, indexes
            index = build_index(builder.batches, self._settings.index_interval)
            self.segments[-1].max_timestamp = index.max_timestamp
            indexes.append((
                index_key(self._settings.namespace, self.topic, self.partition, builder.base_offset),
                index.encode(),
            ))
        return None, indexes

    async def _write_segment(self, builder: SegmentBuilder) -> KafkaError | None:
        key = segment_key(self._settings.namespace, self.topic, self.partition, builder.base_offset)
        if not self._writable():
            return KafkaError(ErrorCode.not_leader_or_follower, f"this gateway no longer owns {self.topic}-{self.partition}")
        data = builder.seal(int(time.time() * 1000))
        try:
            await self._store.put_if_absent(key, data)
        except ObjectExists:
            log.error("segment %s already exists: another writer owns %s-%d; reloading",
                      key, self.topic, self.partition)
            await self._reload_after_fence()
            return KafkaError(ErrorCode.not_leader_or_follower, "another writer took this partition")
        except StorageError as exc:
            log.warning("writing %s failed: %s", key, exc)
            return KafkaError(ErrorCode.kafka_storage_error, f"object store write failed: {exc}")
        if not self._writable():
            # The lease ran out while the PUT was in flight (a pause, a cut from etcd): another
            # gateway may already serve this partition without seeing this object, so it is not
            # acknowledged. The new owner finds it when its own write at this offset collides.
            log.warning("%s was written after this gateway lost %s-%d; not acknowledged",
                        key, self.topic, self.partition)
            return KafkaError(ErrorCode.not_leader_or_follower, "ownership was lost during the write")
        ref = SegmentRef(builder.base_offset, builder.next_offset - 1, key, len(data))
        log.debug("wrote %s-%d offsets %d..%d", self.topic, self.partition, ref.base_offset, ref.last_offset)
        self.segments.append(ref)
        self._bases.append(ref.base_offset)
        self._cache.put(key, Segment(
            parse_segment_header(data), parse_segment_footer(data), data, builder.batches
        ), len(data))
        self.high_watermark = ref.last_offset + 1
        self.flushes += 1
        return None

    async def _reload_after_fence(self) -> None:
        try:
            await self.recover(self.log_start_offset)
        except StorageError as exc:
            log.warning("reloading %s-%d after a fence failed: %s", self.topic, self.partition, exc)

    # -- fetch -----------------------------------------------------------------------------

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def _notify(self) -> None:
        for event in self._waiters:
            event.set()
        self._waiters.clear()

    def _segment_index_for(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    async def load_segment(self, ref: SegmentRef) -> Segment:
        return await self._cache.load(ref.key, ref.size, lambda: self._fetch_segment(ref))

    async def _fetch_segment(self, ref: SegmentRef) -> Segment:
        try:
            data = await self._store.get(ref.key)
        except ObjectNotFound:
            raise KafkaError(ErrorCode.offset_out_of_range, f"{ref.key} was deleted") from None
        except StorageError as exc:
            raise KafkaError(ErrorCode.kafka_storage_error, f"reading {ref.key}: {exc}") from exc
        try:
            return read_segment(data)
        except SegmentFormatError as exc:
            log.error("segment %s is corrupt: %s", ref.key, exc)
            raise KafkaError(ErrorCode.kafka_storage_error, f"{ref.key} is corrupt: {exc}") from exc

    async def read(self, offset: int, max_bytes: int, *, allow_oversize: bool = True) -> bytes:
        """Stored batches from the one holding ``offset``, up to ``max_bytes``.

        With ``allow_oversize`` the first batch is returned even if larger (as Kafka
        does, so a large batch never stalls a consumer)."""
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range)
        parts: list[memoryview] = []
        total = 0
        slot = self._segment_index_for(offset)
        while 0 <= slot < len(self.segments) and offset < self.high_watermark:
            segment = await self.load_segment(self.segments[slot])
            for batch in segment.batches:
                if batch.last_offset < offset:
                    continue
                if total + batch.size > max_bytes and (parts or not allow_oversize):
                    return b"".join(parts)
                parts.append(segment.batch_bytes(batch))
                total += batch.size
                offset = batch.last_offset + 1
            slot += 1
        return b"".join(parts)

    # -- list offsets ----------------------------------------------------------------------

    async def _max_timestamp(self, ref: SegmentRef) -> int:
        if ref.max_timestamp is None:
            try:
                index = SegmentIndex.decode(await self._store.get(
                    index_key(self._settings.namespace, self.topic, self.partition, ref.base_offset)
                ))
                ref.max_timestamp = index.max_timestamp
            except (StorageError, SegmentFormatError):
                segment = await self.load_segment(ref)  # rebuild from the segment itself
                ref.max_timestamp = build_index(segment.batches).max_timestamp
        return ref.max_timestamp

    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First (offset, timestamp) whose timestamp is ``>= timestamp``, or ``None``."""
        for ref in list(self.segments):
            if ref.base_offset < self.log_start_offset and ref.last_offset < self.log_start_offset:
                continue
            if await self._max_timestamp(ref) < timestamp:
                continue
            segment = await self.load_segment(ref)
            for batch in segment.batches:
                if batch.max_timestamp < timestamp:
                    continue
                for record in iter_records(segment.data, batch):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    async def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the greatest timestamp (ListOffsets -3)."""
        best: tuple[int, SegmentRef] | None = None
        for ref in list(self.segments):
            stamp = await self._max_timestamp(ref)
            if best is None or stamp > best[0]:
                best = (stamp, ref)
        if best is None:
            return None
        segment = await self.load_segment(best[1])
        found: tuple[int, int] | None = None
        for batch in segment.batches:
            if batch.max_timestamp == best[0]:
                for record in iter_records(segment.data, batch):
                    if record.timestamp == best[0]:
                        found = (record.offset, record.timestamp)
                        break
                if found:
                    break
        return found

    # -- retention -------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return sum(ref.size for ref in self.segments)

    def move_log_start(self, offset: int) -> int:
        """DeleteRecords: records below ``offset`` are gone (-1 means the high watermark)."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is outside [0, {self.high_watermark}]")
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    async def delete_segments_before_log_start(self) -> int:
        """Delete segments wholly below the log start (never the newest one)."""
        doomed = [ref for ref in self.segments[:-1] if ref.last_offset < self.log_start_offset]
        await self._delete(doomed)
        return len(doomed)

    async def enforce_retention(self, retention_ms: int, retention_bytes: int, now_ms: int) -> int:
        """Delete the oldest segments that are past retention.ms (by their newest timestamp)
        or that keep the partition above retention.bytes. The newest segment is kept, as
        Kafka keeps its active segment, so the high watermark survives a restart."""
        doomed: list[SegmentRef] = []
        candidates = self.segments[:-1]
        if retention_ms >= 0:
            for ref in candidates:
                if await self._max_timestamp(ref) >= now_ms - retention_ms:
                    break
                doomed.append(ref)
        if retention_bytes >= 0:
            size = self.size_bytes - sum(ref.size for ref in doomed)
            for ref in candidates[len(doomed):]:
                if size <= retention_bytes:
                    break
                doomed.append(ref)
                size -= ref.size
        await self._delete(doomed)
        return len(doomed)

    async def _delete(self, doomed: list[SegmentRef]) -> None:
        for ref in doomed:
            # Move the log start first: from here on nobody reads this segment.
            self.log_start_offset = max(self.log_start_offset, ref.last_offset + 1)
            self.segments.remove(ref)
            self._bases = [s.base_offset for s in self.segments]
            self._cache.discard(ref.key)
            await self._store.delete(ref.key)
            await self._store.delete(index_key(self._settings.namespace, self.topic, self.partition, ref.base_offset))
            log.info("deleted segment %s (log start now %d)", ref.key, self.log_start_offset)
