"""One partition's log in memory: offsets assigned in arrival order, the pieces it is stored in.

Produce requests call :meth:`PartitionLog.append` (synchronous: offsets are
assigned and the bytes re-stamped at once, in arrival order) and then await the
returned :class:`FlushTicket`. The gateway's one :class:`~.log_writer.LogWriter`
takes what every partition has pending into one shared log object; when that
object is durable the tickets complete and the high watermark moves, so
acknowledged means durable and only durable data is served. The stored log is a
list of pieces (:mod:`kafscale.protocol.log_view`): compacted segments, then
entries in log objects. Loading it is :mod:`.recovery`'s job, compaction
:mod:`.compaction`'s, timestamp lookups :mod:`.timestamps`'s; its transactions are
kept by its :class:`~.partition_transactions.TransactionBook`.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

import trio

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import ErrorCode, KafkaError, SegmentFormatError
from kafscale.protocol.index import SegmentIndex
from kafscale.protocol.layout import index_key, partition_prefix, transaction_state_key
from kafscale.protocol.log_object import EntryBatches, LogEntry, read_entry
from kafscale.protocol.log_view import ENTRY, SEGMENT, PartitionView, Piece, StoredSegment, pieces_from
from kafscale.protocol.records import BatchHeader, restamp, salvage_batches
from kafscale.protocol.response_fields import Buffer
from kafscale.protocol.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    Segment,
    read_segment,
    segment_body_end,
    segment_has_gaps,
)
from kafscale.protocol.transactions import AbortedTxn
from kafscale.storage_backends import ObjectNotFound, StorageError

from ..clock import Clock
from ..storage import AsyncStore
from .cache import ByteLRU
from .damage import DamageReport
from .partition_transactions import TransactionBook, VerificationGuards
from .producers import ProducerStates
from .stored_log import read_stored


class Flusher(Protocol):
    """What a partition log needs of the writer that flushes it (the gateway's
    :class:`~.log_writer.LogWriter`, which takes the appends through :meth:`PartitionLog.take_pending`)."""

    failing: str | None  # why a write in doubt is being retried, while one is

    @property
    def refusing(self) -> bool:
        """Whether appends are refused now (a write in doubt holds one object's worth)."""
    def mark(self, partition_log: PartitionLog, size: int, *, urgent: bool = False) -> None:
        """``size`` more bytes of ``partition_log`` wait for a flush (``urgent``: flush now)."""

__all__ = ["AppendedEntry", "PartitionLog", "FlushTicket", "LogSettings", "Pending"]

T = TypeVar("T")

log = logging.getLogger("kafscale.log")


@dataclass(frozen=True, slots=True)
class LogSettings:
    namespace: str
    segment_bytes: int
    index_interval: int
    # Bytes of the newest pieces read at recovery to rebuild idempotent-producer state.
    producer_scan_bytes: int = 8 * 2**20
    # Entries stay in log objects at most this long before compaction into a segment,
    compaction_delay_ms: int = 60_000
    # and are compacted sooner once this many bytes of them wait.
    compaction_min_bytes: int = 4 * 2**20


class FlushTicket:
    """Completes when the log object holding an append is durable. A write whose outcome
    is unknown (the store failed or timed out) makes the ticket *in doubt*: waiters get
    KAFKA_STORAGE_ERROR, but the writer keeps retrying the same object, and the ticket
    completes if it lands — a retried idempotent batch then gets its original offset."""

    __slots__ = ("_done", "error", "final", "_callbacks")

    def __init__(self) -> None:
        self._done = trio.Event()
        self.error: KafkaError | None = None
        self.final = False
        self._callbacks: list[Callable[[], None]] = []

    def finish(self, error: KafkaError | None = None) -> None:
        self.error = error
        self.final = True
        self._known()

    def doubt(self, error: KafkaError) -> None:
        if not self.final:
            self.error = error
            self._known()

    def _known(self) -> None:
        self._done.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def then(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the outcome is known (``done``), in the task that makes it
        known (the log writer's): it must not raise or block."""
        self._callbacks.append(callback)

    @property
    def done(self) -> bool:
        """Whether the outcome is known (durable, failed, or in doubt)."""
        return self._done.is_set()

    def check(self) -> None:
        """Once done: raise if the append failed or is in doubt."""
        if self.error is not None:
            raise self.error

    async def wait(self) -> None:
        """Return once the append is durable; raise if it failed or is in doubt."""
        await self._done.wait()
        self.check()


@dataclass(slots=True)
class Pending:
    """Appends not yet handed to the writer."""

    record_sets: list[tuple[bytearray | memoryview, list[BatchHeader]]]
    size: int
    ticket: FlushTicket


@dataclass(frozen=True, slots=True)
class AppendedEntry:
    """A written entry's record sets as they were appended (views of the request frames they
    arrived in, mostly), cached without a copy: made into :class:`EntryBatches` when first
    read, so an entry no consumer reads is never copied."""

    record_sets: tuple[tuple[bytearray | memoryview, list[BatchHeader]], ...]

    def buffers(self) -> list[Buffer]:
        """What the record sets keep alive: the frame of each view, or the record set itself."""
        return [cast(Buffer, record_set.obj) if isinstance(record_set, memoryview) else record_set
                for record_set, _ in self.record_sets]

    def entry_batches(self) -> EntryBatches:
        """One record set as it is (its headers are positioned in it); several joined."""
        if len(self.record_sets) == 1:
            record_set, headers = self.record_sets[0]
            return EntryBatches(record_set, headers)
        batches: list[BatchHeader] = []
        position = 0
        for record_set, stamped in self.record_sets:
            batches.extend(header.at(position=position + header.position) for header in stamped)
            position += len(record_set)
        return EntryBatches(b"".join(record_set for record_set, _ in self.record_sets), batches)


WINDOW_BYTES = 8 * 2**20


@dataclass(frozen=True, slots=True)
class SegmentWindow(EntryBatches):
    """A span of a large segment's batches (positions relative to ``data``), each
    CRC-checked when read."""

    stop: int = field(kw_only=True)  # where in the segment this window ends (the next one starts)

    @property
    def gaps(self) -> bool:
        return True  # a cleaned segment may skip offsets between its batches


class _ReadWhole(Exception):
    """A window did not read back as whole batches: the segment is read whole instead."""


class PartitionLog:
    def __init__(
        self, topic: str, partition: int, store: AsyncStore, settings: LogSettings, cache: ByteLRU,
        writer: Flusher, *, epoch: int, owned_epoch: Callable[[], int | None], damage: DamageReport,
        clock: Clock, topic_id: bytes = bytes(16),
    ) -> None:
        self.topic = topic
        self.clock = clock  # the time of day: marker and object stamps, retention
        self.partition = partition
        self.topic_id = topic_id
        # The leader epoch this log was loaded under; every append it takes is accepted under
        # it. ``owned_epoch`` answers under which epoch this gateway owns the partition now
        # (None: it does not), asked before every write.
        self.epoch = epoch
        self._owned_epoch = owned_epoch
        self.store = store
        self.settings = settings
        self.cache = cache
        self.writer = writer
        self.damage = damage
        self.prefix = partition_prefix(settings.namespace, topic, partition)
        self.pieces: list[Piece] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.compacted_end = 0
        self._uncompacted_bytes: int | None = None  # see uncompacted_bytes
        self.uncompacted_since: float | None = None  # trio time of the oldest entry not compacted
        self._next_offset = 0
        self._pending: Pending | None = None
        self._in_writer = 0  # flushes holding this partition's appends
        self._idle = trio.Event()
        self._idle.set()
        self._waiters: set[trio.Event] = set()
        self.closing = False
        self.fenced = False
        self.producers: ProducerStates[FlushTicket] = ProducerStates()
        self.segment_max_timestamps: dict[str, int] = {}
        self._indexes: dict[str, SegmentIndex | None] = {}  # of large segments read in windows
        # Segments contained in another (a merge killed before it deleted them): the owner deletes them.
        self.redundant: list[StoredSegment] = []
        self._maintenance = trio.Lock()  # maintenance steps take turns: see maintain()
        # The transaction book: read and changed inside the log engine only; the request layer
        # asks the questions below.
        self.book = TransactionBook(store, transaction_state_key(settings.namespace, topic, partition), self)

    # -- transactions, as the request layer asks about them ----------------------------------

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below here."""
        return self.book.last_stable_offset

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[start, end)`` must skip."""
        return self.book.state.aborted_between(start, end)

    def open_transactions(self) -> dict[int, int]:
        """Producer id → first offset of each transaction open here."""
        return dict(self.book.state.open)

    def has_open_transaction(self, producer_id: int) -> bool:
        return producer_id in self.book.state.open

    def transactions_open_since(self) -> dict[int, float]:
        """Producer id → trio time each open transaction was first seen here (the sweep of
        transactions no coordinator knows ages them)."""
        return dict(self.book.open_since)

    async def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int = 0) -> bool:
        """The COMMIT or ABORT marker of the producer's open transaction, durably; False when
        it has none open here."""
        return await self.book.write_marker(producer_id, producer_epoch, commit, coordinator_epoch)

    async def persist_transactions(self) -> None:
        """Store the transaction state if it changed (before a transaction's first batch is
        acknowledged)."""
        await self.book.persist()

    @property
    def verification(self) -> VerificationGuards:
        """KIP-890's guards for first batches of transactions (:class:`VerificationGuards`)."""
        return self.book.verification

    def writable(self) -> bool:
        """Whether what this log accepted may be written: it was not sealed, and this gateway
        owns the partition under the epoch the log (and so each of its appends) was loaded
        under. Owning it again under a newer epoch is not enough: another gateway may have
        used the offsets in between."""
        return not self.fenced and self._owned_epoch() == self.epoch

    def reconfigure(self, settings: LogSettings) -> None:
        """New topic settings (e.g. segment.bytes) apply from the next compaction."""
        self.settings = settings

    def apply_view(self, view: PartitionView, producers: ProducerStates[FlushTicket]) -> None:
        self.pieces = list(view.pieces)
        self._bases = [piece.base_offset for piece in self.pieces]
        self.log_start_offset = view.log_start
        self.high_watermark = self._next_offset = view.high_watermark
        self.compacted_end = view.compacted_end
        self._uncompacted_bytes = None
        self.redundant = list(view.redundant)
        self.uncompacted_since = trio.current_time() if any(p.kind == ENTRY for p in self.pieces) else None
        self.producers = producers

    # -- produce ---------------------------------------------------------------------------

    def append(self, record_set: bytearray | memoryview, headers: list[BatchHeader], *,
               urgent: bool = False) -> tuple[int, FlushTicket]:
        """Assign offsets to a validated record set and queue it for the next flush
        (``urgent``: flushed without lingering).

        A retried batch of an idempotent producer is not appended again: its
        original offset and ticket are returned.
        """
        if self.closing or self.fenced:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.topic}-{self.partition} is not served here now")
        duplicate = self.producers.check(headers[0])
        if duplicate is not None:
            return duplicate.base_offset, duplicate.ticket
        if self.writer.refusing:
            # A write is in doubt and being retried: accept no more than the next object holds.
            raise KafkaError(ErrorCode.kafka_storage_error, f"object store write failing: {self.writer.failing}")
        base_offset = self._next_offset
        stamped = restamp(record_set, headers, base_offset)
        self._next_offset = stamped[-1].last_offset + 1
        if self._pending is None:
            self._pending = Pending([], 0, FlushTicket())
        for header in stamped:
            self.producers.record(header, self._pending.ticket)
            self.book.appended(header)
        self._pending.record_sets.append((record_set, stamped))
        self._pending.size += len(record_set)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self.writer.mark(self, len(record_set), urgent=urgent)
        return base_offset, self._pending.ticket

    def take_pending(self) -> Pending | None:
        """The writer takes what waits, for the object it is building."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._in_writer += 1
        return pending

    def written(self, entry: LogEntry, appended: AppendedEntry) -> None:
        """The object holding ``entry`` (``appended``'s record sets) is durable: serve it."""
        self._in_writer -= 1
        self._add_piece(Piece(ENTRY, entry.key, entry.base_offset, entry.last_offset, entry.length, entry))
        self.cache.put_shared(self.pieces[-1].cache_key, appended, appended.buffers())
        if self.uncompacted_since is None:
            self.uncompacted_since = trio.current_time()
        self.high_watermark = entry.last_offset + 1
        if self._uncompacted_bytes is not None:
            self._uncompacted_bytes += entry.length
        self.wake_readers()
        self._check_idle()

    def not_written(self, pending: Pending, error: KafkaError) -> None:
        """Appends that will never be stored (this gateway lost the partition): nothing after
        them is stored either, so numbering goes back to the high watermark."""
        self._in_writer -= 1
        pending.ticket.finish(error)
        self.producers.discard_from(self.high_watermark)
        self.book.not_written(self.high_watermark)
        if self._pending is not None:
            self._pending.ticket.finish(error)
            self._pending = None
        self._next_offset = self.high_watermark
        self._check_idle()

    def _check_idle(self) -> None:
        if self._pending is None and self._in_writer == 0:
            self._idle.set()

    async def close(self) -> None:
        """Stop taking appends and wait until what was accepted is written (or failed)."""
        self.closing = True
        if self._pending is not None:
            self.writer.mark(self, 0)
        await self._idle.wait()

    # -- pieces ----------------------------------------------------------------------------

    def _add_piece(self, piece: Piece) -> None:
        self.pieces.append(piece)
        self._bases.append(piece.base_offset)

    def replace_pieces(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self._bases = [piece.base_offset for piece in pieces]
        self._uncompacted_bytes = None
        if self._indexes:
            current = {piece.cache_key for piece in pieces}
            self._indexes = {key: index for key, index in self._indexes.items() if key in current}

    async def maintain(self, step: Callable[[], Awaitable[T]]) -> T:
        """Run one maintenance step on this log (compaction, merging, cleaning, retention): one
        at a time, each seeing the pieces the one before it left."""
        async with self._maintenance:
            return await step()

    # -- maintenance results, applied by the log (inside a step of maintain()) ---------------

    def compacted_into(self, segment: Piece, max_timestamp: int | None) -> None:
        """Compaction wrote ``segment``: it replaces the entries up to its last offset."""
        last = segment.last_offset
        segments = [p for p in self.pieces if p.kind == SEGMENT and p.base_offset < segment.base_offset]
        rest = [p for p in self.pieces if p.kind == ENTRY and p.last_offset > last]
        self.compacted_end = last + 1
        self.replace_pieces([*segments, segment, *rest])
        if max_timestamp is not None:
            self.segment_max_timestamps[segment.cache_key] = max_timestamp
        if not any(p.last_offset >= self.compacted_end for p in rest):
            self.uncompacted_since = None

    def nothing_to_compact(self) -> None:
        self.uncompacted_since = None

    def merged_into(self, run: list[Piece], segment: Piece, max_timestamp: int) -> None:
        """Merging rewrote ``run``'s first segment as ``segment``, holding the whole run."""
        merged_away = set(run)
        self.replace_pieces(sorted([p for p in self.pieces if p not in merged_away] + [segment],
                                   key=lambda p: (p.base_offset, p.kind != SEGMENT)))
        for piece in run:
            self.cache.discard(piece.cache_key)
            self.segment_max_timestamps.pop(piece.cache_key, None)
        self.segment_max_timestamps[segment.cache_key] = max_timestamp

    def cleaned_into(self, old: Piece, new: Piece, max_timestamp: int) -> None:
        """The cleaner rewrote ``old`` in place as ``new``: the same offsets, fewer records."""
        self.replace_pieces([new if p is old else p for p in self.pieces])
        self.cache.discard(old.cache_key)
        self.cache.discard_prefix(f"{old.cache_key}+")  # its windows
        self.segment_max_timestamps.pop(old.cache_key, None)
        self.segment_max_timestamps[new.cache_key] = max_timestamp

    def take_redundant(self) -> list[StoredSegment]:
        """Segments found contained in others when the log was loaded, for deletion."""
        doomed, self.redundant = self.redundant, []
        return doomed

    def remember_max_timestamp(self, piece: Piece, max_timestamp: int) -> None:
        self.segment_max_timestamps[piece.cache_key] = max_timestamp

    def fence(self) -> None:
        """Another gateway took the partition over (or this gateway's writer is a new one):
        nothing more is appended; the log manager loads it again on next use."""
        self.fenced = True

    def restore_producers(self, producers: ProducerStates[FlushTicket]) -> None:
        self.producers = producers

    def entry_pieces(self) -> list[Piece]:
        return [piece for piece in self.pieces if piece.kind == ENTRY]

    @property
    def uncompacted_bytes(self) -> int:
        """Bytes of entries past the compacted end. Kept as entries are written, counted again
        only when the pieces change: the compactor asks every second, and a quiet partition
        can hold thousands of entries while it waits for compaction_delay_ms."""
        if self._uncompacted_bytes is None:
            self._uncompacted_bytes = sum(p.size for p in self.pieces
                                          if p.kind == ENTRY and p.last_offset >= self.compacted_end)
        return self._uncompacted_bytes

    def compacted_pieces(self) -> list[Piece]:
        """The pieces starting before the compacted end (segments, and entries overlapping
        them): what merging looks at, without walking every entry waiting behind them."""
        return self.pieces[:bisect.bisect_left(self._bases, self.compacted_end)]

    def cached(self, piece: Piece) -> bool:
        return piece.cache_key in self.cache

    async def load_piece(self, piece: Piece, *, keep: bool = True) -> Segment | EntryBatches:
        """A piece's batches, through the cache; ``keep=False`` (compaction) does not put what
        it reads there, so a rewrite does not evict what consumers read."""
        if not keep:
            cached = self.cache.get(piece.cache_key)
            if isinstance(cached, AppendedEntry):
                return cached.entry_batches()
            return cached if cached is not None else await self._fetch_piece(piece)
        loaded = await self.cache.load(piece.cache_key, piece.size, lambda: self._fetch_piece(piece))
        if isinstance(loaded, AppendedEntry):  # read for the first time: cached as read from now on
            batches = loaded.entry_batches()
            if len(loaded.record_sets) == 1:
                self.cache.put_shared(piece.cache_key, batches, loaded.buffers())
            else:
                self.cache.put(piece.cache_key, batches, len(batches.data))
            return batches
        return loaded

    async def _fetch_piece(self, piece: Piece) -> Segment | EntryBatches:
        try:
            if piece.entry is None:
                key = piece.key
                try:
                    data = await self.store.get_view(key)  # kept and served as it came
                except ObjectNotFound:
                    if piece.last_offset < self.log_start_offset:
                        raise
                    # Merged into an earlier segment by a gateway that held the partition before.
                    key = await self._segment_holding(piece)
                    data = await self.store.get_view(key)
                try:
                    return read_segment(data)
                except SegmentFormatError as exc:
                    return self._salvage(piece, key, data, SEGMENT_HEADER_SIZE, segment_body_end(data), exc)
            entry = piece.entry
            data = await self.store.get_range_view(piece.key, entry.position, entry.position + entry.length)
            try:
                return read_entry(entry, data)
            except SegmentFormatError as exc:
                return self._salvage(piece, piece.key, data, 0, len(data), exc)
        except ObjectNotFound:
            raise KafkaError(ErrorCode.offset_out_of_range, f"{piece.key} was deleted") from None
        except StorageError as exc:
            raise KafkaError(ErrorCode.kafka_storage_error, f"reading {piece.key}: {exc}") from exc

    def _salvage(self, piece: Piece, key: str, data: bytes, start: int, end: int,
                 exc: SegmentFormatError) -> EntryBatches:
        """A piece that fails its checks: its intact batches are served, the damaged offsets
        are reported (consumers get CORRUPT_MESSAGE there, operators the damage report)."""
        gaps = piece.entry is None and segment_has_gaps(data)  # a cleaned segment: walked batch by batch
        batches, damaged = salvage_batches(data, start, end, piece.base_offset, piece.last_offset, gaps=gaps)
        ranges = ", ".join(f"{low}-{high}" for low, high in damaged)
        self.damage.record(key if piece.entry is None else f"{key}#{piece.entry.position}",
                           f"{self.topic}-{self.partition} offsets {ranges or 'none'} unreadable ({exc})")
        return EntryBatches(data, batches, tuple(damaged))

    async def _segment_holding(self, piece: Piece) -> str:
        """The key of the segment that now holds a deleted segment's offsets."""
        holding = await read_stored(self.store, reads.segments_holding(self.prefix, piece.base_offset,
                                                                          piece.last_offset))
        if len(holding) != 1:  # merges join whole segments: one holds them all, or none does
            raise ObjectNotFound(piece.key)
        return holding[0].key

    # -- fetch -----------------------------------------------------------------------------

    def add_waiter(self, event: trio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def wake_readers(self) -> None:
        """Long-polling fetches re-read: new data is durable, or the last stable offset moved."""
        for event in self._waiters:
            event.set()
        self._waiters.clear()

    async def _load_for(self, piece: Piece, offset: int, after: int | None = None) -> Segment | EntryBatches | SegmentWindow:
        """What serves ``offset`` of a piece: the piece whole (through the cache), or, for a
        segment over ``2 * WINDOW_BYTES`` not cached whole, the window of it that holds the
        offset. A consumer of many partitions then holds a few MiB of each in the cache, not
        a 64 MiB segment each, which evicted one another and were read again and again."""
        if piece.kind != SEGMENT or piece.size <= 2 * WINDOW_BYTES or self.cached(piece):
            return await self.load_piece(piece)
        if piece.cache_key not in self._indexes:
            try:
                self._indexes[piece.cache_key] = await read_stored(self.store, reads.segment_index(piece))
            except StorageError as exc:
                raise KafkaError(ErrorCode.kafka_storage_error, f"reading the index of {piece.key}: {exc}") from exc
        index = self._indexes[piece.cache_key]
        bounds = None if index is None else reads.segment_window(piece, index, offset, WINDOW_BYTES, after)
        if bounds is None:
            return await self.load_piece(piece)
        start, stop = bounds
        try:
            return await self.cache.load(f"{piece.cache_key}+{start}", stop - start,
                                         lambda: self._fetch_window(piece, start, stop))
        except _ReadWhole:
            return await self.load_piece(piece)

    async def _fetch_window(self, piece: Piece, start: int, stop: int) -> SegmentWindow:
        try:
            span = await read_stored(self.store, reads.window_span(piece, start, stop))
        except StorageError as exc:
            raise KafkaError(ErrorCode.kafka_storage_error, f"reading {piece.key}: {exc}") from exc
        if not isinstance(span, tuple):
            raise _ReadWhole  # damaged or merged away: the whole read decides
        return SegmentWindow(*span, stop=stop)

    async def read(self, offset: int, max_bytes: int, *, allow_oversize: bool = True,
                   end: int | None = None) -> list[memoryview]:
        """Stored batches from the one holding ``offset``, up to ``max_bytes``, and below
        ``end`` (the high watermark; read_committed passes the last stable offset): views of
        the cached objects, batches adjacent in one object as one view.

        With ``allow_oversize`` the first batch is returned even if larger (as Kafka
        does, so a large batch never stalls a consumer)."""
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range)
        end = self.high_watermark if end is None else min(end, self.high_watermark)
        parts: list[memoryview] = []
        run_of, run_start, run_end = None, 0, 0  # the object the last view is of, and its span there
        total = 0
        slot = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        pieces = self.pieces
        after: int | None = None  # where the window of a large segment read last ended
        while slot < len(pieces) and offset < end:
            piece = pieces[slot]
            slot += 1
            if piece.last_offset < offset:
                continue
            if piece.base_offset > offset:
                break  # offsets in no piece: a log object whose directory is damaged
            stored = await self._load_for(piece, offset, after)
            after = None
            for batch in stored.batches:
                if batch.last_offset < offset:
                    continue
                if batch.base_offset > offset:
                    if not stored.gaps:
                        break  # a damaged batch of this piece
                    offset = batch.base_offset  # cleaned away: the next batch answers
                if batch.base_offset >= end or total + batch.size > max_bytes and (parts or not allow_oversize):
                    return parts
                if run_of is stored and run_end == batch.position:  # the next batch of the same object
                    run_end += batch.size
                    parts[-1] = memoryview(stored.data)[run_start:run_end]
                else:
                    run_of, run_start, run_end = stored, batch.position, batch.position + batch.size
                    parts.append(stored.batch_bytes(batch))
                total += batch.size
                offset = batch.last_offset + 1
            if isinstance(stored, SegmentWindow) and offset <= piece.last_offset \
                    and stored.stop < piece.size - SEGMENT_FOOTER_SIZE and offset > stored.batches[-1].last_offset:
                slot, after = slot - 1, stored.stop  # the segment's next window
                continue
            if offset <= piece.last_offset:
                if not stored.gaps:
                    break
                offset = piece.last_offset + 1
        if not parts and offset < end:
            # Never skip acknowledged offsets silently (Kafka's answer to a corrupt record):
            # the consumer sees the error at this offset and may seek past it.
            raise KafkaError(ErrorCode.corrupt_message,
                             f"{self.topic}-{self.partition}: offset {offset} is damaged or lost in storage")
        return parts

    def pieces_from(self, offset: int) -> list[Piece]:
        return pieces_from(self.pieces, offset)

    # -- retention -------------------------------------------------------------------------

    @property
    def size_bytes(self) -> int:
        return sum(piece.size for piece in self.pieces)

    def move_log_start(self, offset: int) -> int:
        """DeleteRecords: records below ``offset`` are gone (-1 means the high watermark)."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range,
                             f"offset {offset} is outside [0, {self.high_watermark}]")
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    async def delete_pieces(self, doomed: list[Piece]) -> None:
        """Forget pieces wholly below the log start; delete segment objects (log objects are
        deleted by the janitor once nothing in them is needed)."""
        for piece in doomed:
            # Move the log start first: from here on nobody reads this piece.
            self.log_start_offset = max(self.log_start_offset, piece.last_offset + 1)
            self.replace_pieces([p for p in self.pieces if p is not piece])
            self.cache.discard(piece.cache_key)
            self.cache.discard_prefix(f"{piece.cache_key}+")  # its windows
            if piece.entry is None:
                await self.store.delete(piece.key)
                await self.store.delete(index_key(self.settings.namespace, self.topic, self.partition,
                                                  piece.base_offset))
                log.info("deleted segment %s (log start now %d)", piece.key, self.log_start_offset)
