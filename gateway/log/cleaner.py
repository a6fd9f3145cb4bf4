"""The log cleaner: on compacted topics, every key keeps only its newest record.

Kafka's word is "cleaner", and it is kept here so it is never confused with
compaction (:mod:`compaction`), which turns shared log objects into segments. The
cleaner works on segments only: records still in log objects are the open head of
the log, as Kafka's active segment is, and wait for compaction.

A pass over one partition (its owner, one of the partition log's maintenance steps):

1. **Map.** The dirty segments (from :class:`Progress` ``cleaned_end``) are read in offset order and
   each keyed record's offset goes into a :class:`KeyMap` of at most
   ``cleaner_dedupe_buffer_bytes`` (records of aborted transactions are not mapped).
   The pass stops mapping when the map is full, at damage, at the first segment
   newer than ``min.compaction.lag.ms``, or at the segment holding the last stable
   offset (an open transaction's records may yet be aborted).
2. **Rewrite.** Every segment from the log start up to where mapping stopped is
   read again with its version and cleaned (:mod:`kafscale.protocol.cleaning`). A
   segment that changed is written back *in place*, same key, same offset range,
   with ``put_if_unchanged``: the old segment is whole until the new one replaces it
   atomically, so at every moment, across kill -9 at any step, a reader finds every
   key's newest record. Segments are rewritten oldest first and a pass stops at the
   first it cannot rewrite, so a tombstone never goes while an older value of its
   key is still stored in a segment before it.
3. Its index (from 8 MiB) is written before the rewrite, as merging does.

Safety with several gateways: every rewrite is conditional on the version read, and
asked of ``writable()`` (this gateway owns the partition under the epoch it loaded
it with) just before. What a paused cleaner could still publish after losing the
partition is a cleaning of the same offsets against a map of records that exist: it
keeps every key's newest record of that snapshot (docs/operations.md, "Compacted
topics", states the window precisely).
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Protocol

import trio

from kafscale.protocol.cleaning import KeyMap, clean_batch, newest_batch_per_producer
from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.index import build_index
from kafscale.protocol.layout import cleaner_checkpoint_key, index_key
from kafscale.protocol.log_object import EntryBatches
from kafscale.protocol.log_view import SEGMENT, Piece
from kafscale.protocol.records import parse_batch_header
from kafscale.protocol.segment import Segment, SegmentBuilder, read_segment
from kafscale.protocol.transactions import AbortedBatches
from kafscale.storage_backends import ObjectChanged, ObjectNotFound, StorageError

from ..clock import Clock
from ..maintenance import MaintenanceFailures, every
from ..metadata import TopicInfo
from ..topic_configs import TopicPolicy
from .merging import index_before_rewrite
from .partition_log import PartitionLog

__all__ = ["Cleaner", "CleanerStats", "Progress", "clean", "cleaning_due", "dirtiness"]

log = logging.getLogger("kafscale.cleaner")


@dataclass(slots=True)
class CleanerStats:
    passes: int = 0
    errors: int = 0
    bytes_read: int = 0
    bytes_removed: int = 0
    records_removed: int = 0
    keys_mapped: int = 0
    stalled_passes: int = 0  # passes whose key map could not take the first dirty record's key
    segments_rewritten: int = 0
    seconds: float = 0.0
    worst_dirty_ratio: float = 0.0
    dirty_bytes: int = 0  # over the compacted partitions this gateway owns, at the last check


@dataclass(slots=True)
class Progress:
    """How far the cleaner got with one loaded partition (a loaded log is a new object, so a
    reload starts a new one, from the stored checkpoint)."""

    cleaned_end: int = 0  # offsets below were cleaned against a key map that covered them
    checkpoint_read: bool = False
    dirty_since_ms: int | None = None  # when this gateway first saw a segment not cleaned yet
    tombstones_due_ms: int | None = None  # when the next kept tombstone's horizon passes
    held_back_by_ms: int | None = None  # newest timestamp of the dirty segment min.compaction.lag held

    def restored(self, cleaned_end: int, partition_log: PartitionLog) -> None:
        """The stored checkpoint: offsets below it were cleaned by an earlier pass (of this
        gateway before a restart, or of a former owner)."""
        self.checkpoint_read = True
        segments_end = max((p.last_offset + 1 for p in _segments(partition_log)), default=0)
        self.cleaned_end = max(self.cleaned_end, min(cleaned_end, segments_end))

    def seen(self, dirty_bytes: int, now_ms: int) -> None:
        """A check found this much not cleaned yet (max.compaction.lag counts from the first)."""
        if not dirty_bytes:
            self.dirty_since_ms = None
        elif self.dirty_since_ms is None:
            self.dirty_since_ms = now_ms

    def done(self, mapped_end: int, tombstones_due_ms: int | None, held_back_by_ms: int | None) -> None:
        self.cleaned_end = max(self.cleaned_end, mapped_end)
        self.tombstones_due_ms = tombstones_due_ms
        self.held_back_by_ms = held_back_by_ms


def _segments(partition_log: PartitionLog) -> list[Piece]:
    return [p for p in partition_log.compacted_pieces()
            if p.kind == SEGMENT and p.last_offset >= partition_log.log_start_offset]


def dirtiness(partition_log: PartitionLog, progress: Progress) -> tuple[int, int]:
    """(bytes of segments not cleaned yet, bytes of all segments)."""
    segments = _segments(partition_log)
    dirty = sum(p.size for p in segments if p.last_offset >= progress.cleaned_end)
    return dirty, sum(p.size for p in segments)


def cleaning_due(partition_log: PartitionLog, progress: Progress, policy: TopicPolicy, now_ms: int,
                 dirty: int, total: int) -> bool:
    """Kafka's triggers, given the partition's :func:`dirtiness`: the dirty ratio reached, a
    dirty record older than the maximum lag, or a kept tombstone's horizon passed; never
    while min.compaction.lag holds it."""
    if partition_log.closing or partition_log.fenced:
        return False
    if progress.tombstones_due_ms is not None and now_ms >= progress.tombstones_due_ms:
        return True
    held = progress.held_back_by_ms
    if held is not None and now_ms - held < policy.min_compaction_lag_ms:
        return False  # the topic's current lag, so a changed config applies at once
    if not dirty:
        return False
    if dirty / total >= policy.min_cleanable_dirty_ratio:
        return True
    since = progress.dirty_since_ms
    return since is not None and now_ms - since >= policy.max_compaction_lag_ms


@dataclass(slots=True)
class _Pass:
    keys: KeyMap
    mapped_end: int
    stop: int  # rewrite segments starting below this offset
    aborted: AbortedBatches
    held_back_by_ms: int | None = None  # newest timestamp of the segment min.compaction.lag stopped at


async def _map(partition_log: PartitionLog, first_dirty: int, policy: TopicPolicy, budget: int, now_ms: int,
               stats: CleanerStats) -> _Pass:
    work = _Pass(KeyMap(budget), first_dirty, partition_log.log_start_offset,
                 AbortedBatches(partition_log.book.state.aborted))
    youngest_allowed = now_ms - policy.min_compaction_lag_ms
    stable = partition_log.last_stable_offset
    for piece in _segments(partition_log):
        if piece.last_offset < first_dirty:
            work.stop = piece.last_offset + 1
            continue
        if piece.last_offset >= stable:
            break  # an open transaction's records: cleaned once it ends
        known = partition_log.segment_max_timestamps.get(piece.cache_key)
        if policy.min_compaction_lag_ms and known is not None and known > youngest_allowed:
            work.held_back_by_ms = known
            break
        loaded = await partition_log.load_piece(piece, keep=False)
        if loaded.damaged:
            break  # cleaned up to it; a damaged segment is never rewritten
        newest = max((b.max_timestamp for b in loaded.batches), default=0)
        if policy.min_compaction_lag_ms and newest > youngest_allowed:
            work.held_back_by_ms = newest
            break
        stats.bytes_read += piece.size
        # Decompressing and hashing a segment's records is seconds of CPU for a large one:
        # off the event loop, so requests keep being served meanwhile.
        mapped_to = await trio.to_thread.run_sync(_map_segment, work.keys, loaded, first_dirty, work.aborted)
        work.stop = piece.last_offset + 1
        if mapped_to is None:
            work.mapped_end = piece.last_offset + 1
        else:
            work.mapped_end = max(work.mapped_end, mapped_to)
            if mapped_to <= first_dirty:  # not one key fits: no pass can advance
                stats.stalled_passes += 1
                log.warning("%s-%d: the cleaner's key map (%d keys) cannot hold one more key at offset %d: "
                            "raise cleaner_dedupe_buffer_bytes", partition_log.topic, partition_log.partition,
                            len(work.keys), mapped_to)
            break  # the key map is full: the next pass goes on from here
    return work


def _map_segment(keys: KeyMap, loaded: Segment | EntryBatches, first_dirty: int,
                 aborted: AbortedBatches) -> int | None:
    """Map the segment's records from ``first_dirty`` on; ``None`` if all of them fit, else
    the offset mapping stopped before."""
    for batch in loaded.batches:
        if batch.last_offset < first_dirty or batch in aborted:
            continue
        stopped = keys.add_batch(loaded.data, batch, first_dirty)
        if stopped is not None:
            return stopped
    return None


async def clean(partition_log: PartitionLog, progress: Progress, policy: TopicPolicy, budget_bytes: int,
                stats: CleanerStats, now_ms: int | None = None) -> int:
    """One cleaning pass over a partition; returns the segments rewritten."""
    now_ms = partition_log.clock.now_ms() if now_ms is None else now_ms
    async def step() -> int:
        started = time.monotonic()
        if not progress.checkpoint_read:
            progress.restored(await _read_checkpoint(partition_log), partition_log)
        work = await _map(partition_log, progress.cleaned_end, policy, budget_bytes, now_ms, stats)
        stats.keys_mapped = max(stats.keys_mapped, len(work.keys))
        rewritten = 0
        tombstones_due: int | None = None
        finished = True
        for piece in _segments(partition_log):
            if piece.base_offset >= work.stop:
                break
            outcome = await _rewrite(partition_log, piece, work, policy, now_ms, stats)
            if outcome is None:
                finished = False
                break  # changed under us, damaged or no longer ours: the next pass starts over
            changed, due = outcome
            rewritten += changed
            if due is not None:
                tombstones_due = due if tombstones_due is None else min(tombstones_due, due)
            await trio.lowlevel.checkpoint()
        if finished:
            before = progress.cleaned_end
            progress.done(work.mapped_end, tombstones_due, work.held_back_by_ms)
            if progress.cleaned_end > before:
                await _write_checkpoint(partition_log, progress.cleaned_end)
                # The aborted transactions' records below are gone now: their spans are no longer
                # needed (Kafka's cleaner drops them from the transaction index as it cleans), so
                # the stored transaction state stays the size of what is not cleaned yet.
                await partition_log.book.forget_aborted_below(progress.cleaned_end)
        stats.passes += 1
        stats.segments_rewritten += rewritten
        stats.seconds += time.monotonic() - started
        return rewritten

    return await partition_log.maintain(step)


def _checkpoint_key(partition_log: PartitionLog) -> str:
    return cleaner_checkpoint_key(partition_log.settings.namespace, partition_log.topic, partition_log.partition)


async def _read_checkpoint(partition_log: PartitionLog) -> int:
    """How far the partition was cleaned before it was loaded (0 if unknown): so a restart or
    a move does not map and read the whole partition again."""
    try:
        stored = json.loads(await partition_log.store.get(_checkpoint_key(partition_log)))
        if bytes.fromhex(stored["topic_id"]) != partition_log.topic_id:
            return 0  # a deleted topic's of the same name
        return max(int(stored["cleaned_end"]), 0)
    except ObjectNotFound:
        return 0
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s is unreadable (%s): the partition is cleaned from its start", _checkpoint_key(partition_log),
                    exc)
        return 0


async def _write_checkpoint(partition_log: PartitionLog, cleaned_end: int) -> None:
    document = {"topic_id": partition_log.topic_id.hex(), "cleaned_end": cleaned_end}
    try:  # derived: lost, it costs one pass over the whole partition, never a record
        await partition_log.store.put(_checkpoint_key(partition_log), json.dumps(document).encode(), durable=False)
    except StorageError as exc:
        log.warning("writing %s failed: %s", _checkpoint_key(partition_log), exc)


async def _rewrite(partition_log: PartitionLog, piece: Piece, work: _Pass, policy: TopicPolicy, now_ms: int,
                   stats: CleanerStats) -> tuple[int, int | None] | None:
    """Clean one segment in place: (1 if rewritten else 0, when a kept tombstone's horizon
    passes), or ``None`` if it could not be (the pass stops)."""
    store = partition_log.store
    try:
        data, version = await store.get_versioned(piece.key)
    except ObjectNotFound:
        return None  # merged away since the pass began
    try:
        segment = await trio.to_thread.run_sync(read_segment, data)  # its CRC and batches checked
    except SegmentFormatError:
        return None  # damaged: served in part by the read path, never rewritten
    if segment.last_offset != piece.last_offset:
        return None  # rewritten by someone else since this gateway loaded the partition
    keep_header = newest_batch_per_producer(segment.batches)
    if segment.batches and not any(p.base_offset > piece.last_offset for p in partition_log.pieces):
        keep_header.add(segment.batches[-1].position)  # the log's last batch: consumers reach its end
    builder, removed, due = await trio.to_thread.run_sync(_clean_segment, segment, work, keep_header, now_ms,
                                                          policy.delete_retention_ms)
    if builder is None:
        return 0, due
    if not partition_log.writable():
        return None
    cleaned = await trio.to_thread.run_sync(builder.seal, partition_log.clock.now_ms())
    settings = partition_log.settings
    index = build_index(builder.batches, settings.index_interval, len(cleaned))
    await index_before_rewrite(store, index_key(settings.namespace, partition_log.topic, partition_log.partition,
                                                piece.base_offset), len(cleaned), index)
    try:
        await store.put_if_unchanged(piece.key, cleaned, version)
    except ObjectChanged:
        log.warning("%s changed while it was cleaned; the pass stops", piece.key)
        return None
    partition_log.cleaned_into(piece, Piece(SEGMENT, piece.key, piece.base_offset, piece.last_offset, len(cleaned)),
                               index.max_timestamp)
    stats.records_removed += removed
    stats.bytes_removed += len(data) - len(cleaned)
    log.debug("cleaned %s: %d records removed, %d -> %d bytes", piece.key, removed, len(data), len(cleaned))
    return 1, due


def _clean_segment(segment: Segment, work: _Pass, keep_header: set[int], now_ms: int,
                   delete_retention_ms: int) -> tuple[SegmentBuilder | None, int, int | None]:
    """The segment cleaned (``None`` if nothing changed), the records removed, and when the
    earliest tombstone it keeps may go."""
    builder = SegmentBuilder(segment.base_offset)
    changed = False
    removed = 0
    due: int | None = None
    for batch in segment.batches:
        result = clean_batch(segment.data, batch, work.keys, now_ms, delete_retention_ms,
                             keep_header=batch.position in keep_header, aborted=batch in work.aborted)
        changed = changed or result.changed
        removed += result.records_removed
        if result.tombstone_horizon is not None:
            due = result.tombstone_horizon if due is None else min(due, result.tombstone_horizon)
        if result.data is not None:
            builder.skip_to(batch.base_offset)
            builder.append(result.data, [parse_batch_header(result.data, 0)])
    builder.skip_to(segment.last_offset + 1)
    return (builder if changed else None), removed, due


class CleanedLogs(Protocol):
    """What the cleaner needs of the log manager that runs it."""

    def topics(self) -> dict[str, TopicInfo]: ...
    def loaded(self) -> list[PartitionLog]: ...
    def policy(self, info: TopicInfo | None) -> TopicPolicy: ...

    @property
    def clock(self) -> Clock: ...


class Cleaner:
    """Cleans the compacted partitions this gateway owns, within a share of its time."""

    def __init__(self, logs: CleanedLogs, failures: MaintenanceFailures, budget_bytes: int, backoff_s: float,
                 time_share: float) -> None:
        self.logs = logs
        self.failures = failures
        self.budget_bytes = budget_bytes
        self.backoff_s = backoff_s
        self.time_share = time_share
        self.stats = CleanerStats()
        self._progress: weakref.WeakKeyDictionary[PartitionLog, Progress] = weakref.WeakKeyDictionary()

    def progress(self, partition_log: PartitionLog) -> Progress:
        """How far this gateway cleaned the loaded log (a reloaded one starts anew)."""
        found = self._progress.get(partition_log)
        if found is None:
            found = self._progress[partition_log] = Progress()
        return found

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await every(self.backoff_s, "cleaning", self.pass_once, self.failures)

    def _check(self, partition_log: PartitionLog, now_ms: int) -> tuple[TopicPolicy, bool, int, int] | None:
        """(policy, due, dirty bytes, total bytes) of a partition this gateway cleans; None
        for one it does not (not compacted, or not writable here)."""
        info = self.logs.topics().get(partition_log.topic)
        if info is None:
            return None
        policy = self.logs.policy(info)
        if not policy.compact or not partition_log.writable():
            return None
        progress = self.progress(partition_log)
        dirty, total = dirtiness(partition_log, progress)
        progress.seen(dirty, now_ms)
        return policy, cleaning_due(partition_log, progress, policy, now_ms, dirty, total), dirty, total

    async def pass_once(self, *, everything: bool = False, now_ms: int | None = None) -> int:
        """Clean every compacted partition that is due (``everything``: each one once)."""
        now_ms = self.logs.clock.now_ms() if now_ms is None else now_ms
        rewritten = 0
        worst = 0.0
        dirty_total = 0
        for partition_log in self.logs.loaded():
            with self.failures.guard("cleaning", f"{partition_log.topic}-{partition_log.partition}") as outcome:
                checked = self._check(partition_log, now_ms)
                if checked is None:
                    continue
                policy, due, dirty, total = checked
                worst = max(worst, dirty / total if total else 0.0)
                dirty_total += dirty
                if not (due or everything):
                    continue
                started = trio.current_time()
                rewritten += await clean(partition_log, self.progress(partition_log), policy, self.budget_bytes,
                                         self.stats, now_ms)
            if outcome.failed:
                self.stats.errors += 1
                continue
            if not everything:
                await trio.sleep((trio.current_time() - started) * (1 / self.time_share - 1))
        self.stats.worst_dirty_ratio = worst
        self.stats.dirty_bytes = dirty_total
        return rewritten
