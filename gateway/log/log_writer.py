"""The gateway's single writer: one shared log object per flush, for every partition it serves.

The writer's objects are numbered slots ``~log/{writer}/{seq}.kfl``, each created
put-if-absent, one after the other. A flush takes what every partition has
pending (after ``linger_ms``, or at once when ``flush_bytes`` wait; appends that
arrive during a write share the next one: group commit), writes the object, and
only then completes the tickets and moves the high watermarks.

Without a linger, an object under load still *fills*: when bytes arrive fast enough
that ``fill_wait_ms`` would add at least ``FILL_MIN_BYTES`` to it, the flush waits
that long (or until ``flush_bytes`` wait). Each object costs about a millisecond of
CPU whatever its size, so fewer, larger objects are cheaper per byte; a trickle
(a client producing 1,000 small records a second) never waits.

- The slot is taken (ObjectExists): it holds our own object (an earlier attempt
  whose answer was lost: done) or a *seal* written by a gateway that took
  partitions over. Sealed partitions fail with NOT_LEADER_OR_FOLLOWER; the rest is
  written again, same offsets, at the next slot.
- The store fails: the outcome is unknown, so the tickets are *in doubt*
  (clients get KAFKA_STORAGE_ERROR and retry) and the very same object is retried
  at the same slot until it lands or the slot is sealed. Offsets are never handed
  out twice; new appends are refused meanwhile.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import log_object_key
from kafscale.protocol.log_object import LogObjectBuilder, LogObjectDirectory
from kafscale.storage_backends import ObjectExists, ObjectNotFound, Pieces, StorageError

from ..clock import Clock
from ..ownership import Mode
from ..storage import AsyncStore, ObjectWrites
from .log_objects import LogObjects, read_slot
from .partition_log import AppendedEntry, PartitionLog, Pending

__all__ = ["LogWriter", "new_writer_id"]

log = logging.getLogger("kafscale.writer")

_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 5.0
FILL_MIN_BYTES = 256 * 1024


def new_writer_id(node_id: int) -> str:
    """``{node}-{hex}``: unique per start, and ordered by start time within a node."""
    return f"{node_id}-{time.time_ns() // 1000:x}{os.urandom(3).hex()}"


class LogWriter:
    def __init__(self, store: AsyncStore, namespace: str, node_id: int, objects: LogObjects,
                 linger_ms: int, flush_bytes: int, *, mode: Mode, clock: Clock, fill_wait_ms: int = 0,
                 on_new_writer: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self._clock = clock
        self.namespace = namespace
        self.node_id = node_id
        self.writer_id = new_writer_id(node_id)
        # A seal of every partition in this writer's next slot: alone, a newer run of this
        # gateway took the store over, and this one stops writing (``taken_over``). In a
        # cluster another gateway only took this one for dead: it writes on as a new writer,
        # after ``on_new_writer`` (every loaded partition is loaded again, fencing the others
        # first, before it is written).
        self.mode = mode
        self.on_new_writer = on_new_writer
        self.taken_over = False
        self.objects = objects
        self.linger_ms = linger_ms
        self.flush_bytes = flush_bytes
        self.fill_wait_ms = fill_wait_ms
        self.sequence = 0
        self._dirty: dict[PartitionLog, None] = {}
        self._pending_bytes = 0
        self._taken_at = 0.0  # trio time the last flush took what was pending
        self._wake = trio.Event()
        self._full = trio.Event()
        self.failing: str | None = None  # set while a write in doubt is retried
        self.sealed_all = False
        # Metrics: objects and bytes written, for the store's request rate.
        self.objects_written = 0
        self.bytes_written = 0

    def key(self, sequence: int) -> str:
        return log_object_key(self.namespace, self.writer_id, sequence)

    async def open(self) -> None:
        """Create slot 0 (an empty object) before serving anything: from then on this writer
        is listed, so a gateway taking partitions over can seal it."""
        data, directory = LogObjectBuilder().encode(self.key(0), 0, self._clock.now_ms())
        await self.store.put_if_absent(directory.key, data)
        self.objects.add(directory, len(data))
        self.sequence = 1

    async def check_taken_over(self) -> bool:
        """Alone: whether a newer run of this gateway sealed this writer whole, found without
        waiting for the next write (readiness asks: one HEAD, and a read when a seal is there).
        A cluster's gateway sealed by another goes on as a new writer at its next write."""
        if self.taken_over or self.mode is Mode.CLUSTER:
            return self.taken_over
        key = self.key(self.sequence)
        if await self.store.head(key) is None:
            return False
        found = await read_slot(self.store, key)
        if found is not None and found.seals_all and key == self.key(self.sequence):
            self.taken_over = self.sealed_all = True
            log.critical("another run of this gateway took the store over: this one writes nothing more")
        return self.taken_over

    @property
    def refusing(self) -> bool:
        """While a write in doubt is retried, appends queue up to one object's worth."""
        return self.failing is not None and self._pending_bytes >= self.flush_bytes

    def mark(self, partition_log: PartitionLog, size: int, *, urgent: bool = False) -> None:
        """``urgent``: flush without lingering (a transaction marker: a commit waits for it)."""
        self._dirty[partition_log] = None
        self._pending_bytes += size
        self._wake.set()
        if urgent or self._pending_bytes >= self.flush_bytes or partition_log.closing:
            self._full.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        # Shielded while a write is in progress: it is finished, not abandoned. One scope for
        # the writer's life, not one per object.
        writing = trio.CancelScope()
        async with self.store.serial_writes() as writes:
            with writing:
                while True:
                    writing.shield = False
                    await self._wake.wait()
                    wait_ms = self.linger_ms or (self.fill_wait_ms if self._arriving_fast() else 0)
                    if wait_ms:
                        with trio.move_on_after(wait_ms / 1000):
                            await self._full.wait()
                    self._wake, self._full = trio.Event(), trio.Event()
                    self._pending_bytes = 0
                    self._taken_at = trio.current_time()
                    dirty, self._dirty = list(self._dirty), {}
                    writing.shield = True
                    try:
                        await self._flush(dirty, writes)
                    except Exception:  # a bug must fail these requests, not stop the writer
                        log.exception("flush failed")

    def _arriving_fast(self) -> bool:
        """Whether bytes arrive fast enough, at their rate since the last flush took what was
        pending, that waiting ``fill_wait_ms`` adds ``FILL_MIN_BYTES`` to the object."""
        if not self.fill_wait_ms or self._full.is_set():
            return False
        elapsed = trio.current_time() - self._taken_at
        return self._pending_bytes * self.fill_wait_ms / 1000 >= FILL_MIN_BYTES * max(elapsed, 1e-6)

    async def _flush(self, dirty: list[PartitionLog], writes: ObjectWrites) -> None:
        items: list[tuple[PartitionLog, Pending]] = []
        for partition_log in dirty:
            pending = partition_log.take_pending()
            if pending is None:
                continue
            if self.sealed_all or not partition_log.writable():
                partition_log.not_written(pending, KafkaError(
                    ErrorCode.not_leader_or_follower,
                    f"this gateway no longer owns {partition_log.topic}-{partition_log.partition} "
                    f"under epoch {partition_log.epoch}"))
                continue
            items.append((partition_log, pending))
        delay = _RETRY_FIRST_S
        while items:
            builder = LogObjectBuilder()
            for partition_log, pending in items:
                for record_set, stamped in pending.record_sets:
                    builder.append(partition_log.topic, partition_log.partition, record_set, stamped,
                                   partition_log.epoch, partition_log.topic_id)
            pieces, directory = builder.encode_pieces(self.key(self.sequence), self.sequence, self._clock.now_ms())
            data = Pieces(pieces)  # the record sets as appended, not joined into a copy
            while True:  # the same bytes, until the slot is decided
                outcome = await self._put(directory, data, writes)
                if outcome is not None:
                    break
                error = KafkaError(ErrorCode.kafka_storage_error, f"object store write failing: {self.failing}")
                for _, pending in items:
                    pending.ticket.doubt(error)
                await self.store.wait_writable(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
            if outcome is directory:
                self._written(directory, data.nbytes, items)
                return
            items = self._apply_seal(outcome, items)
            self.sequence += 1
            if self.sealed_all:
                if self.mode is Mode.CLUSTER:
                    await self._start_new_writer()
                else:
                    self.taken_over = True
                    log.critical("another run of this gateway took the store over: this one writes nothing more")
                return

    async def _start_new_writer(self) -> None:
        """Another gateway took this one for dead and sealed its writer whole (a pause past the
        lease): go on as a new writer, whose first slot makes it known to the others."""
        self.writer_id = new_writer_id(self.node_id)
        self.sealed_all = False
        delay = _RETRY_FIRST_S
        while True:
            try:
                await self.open()
                break
            except StorageError as exc:
                log.warning("opening writer %s failed (retrying): %s", self.writer_id, exc)
                await self.store.wait_writable(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
        log.warning("this gateway's writer was sealed; writing on as %s", self.writer_id)
        self.on_new_writer()

    async def _put(self, directory: LogObjectDirectory, data: Pieces,
                   writes: ObjectWrites) -> LogObjectDirectory | None:
        """Our directory once written; the directory found in the slot if it was taken;
        ``None`` while the outcome is unknown."""
        try:
            await writes.put_if_absent(directory.key, data)
        except ObjectExists:
            try:  # what took the slot: a seal, or our own earlier attempt
                found = await read_slot(self.store, directory.key)
                if found is None:
                    raise ObjectNotFound(directory.key)
            except Exception as exc:
                self.failing = f"slot {directory.key} is taken and unreadable: {exc}"
                log.error("%s", self.failing)
                return None
            if found.entries == directory.entries and found.created_ms == directory.created_ms:
                self.failing = None
                return directory  # our own earlier attempt landed
            return found
        except StorageError as exc:
            self.failing = str(exc) or type(exc).__name__
            log.warning("writing %s failed (retrying the same object): %s", directory.key, self.failing)
            return None
        self.failing = None
        return directory

    def _written(self, directory: LogObjectDirectory, size: int,
                 items: list[tuple[PartitionLog, Pending]]) -> None:
        self.sequence += 1
        self.objects.add(directory, size)
        self.objects_written += 1
        self.bytes_written += size
        for (partition_log, pending), entry in zip(items, directory.entries, strict=True):
            partition_log.written(entry, AppendedEntry(tuple(pending.record_sets)))
            pending.ticket.finish()
        log.debug("wrote %s: %d partition(s), %d bytes", directory.key, len(items), size)

    def _apply_seal(self, found: LogObjectDirectory, items: list[tuple[PartitionLog, Pending]]
                    ) -> list[tuple[PartitionLog, Pending]]:
        self.objects.add(found, 0)
        if not found.is_seal:
            log.critical("slot %s holds another writer's data: this gateway stops writing", found.key)
            self.sealed_all = True
        elif found.seals_all:
            log.warning("%s: this writer was sealed whole", found.key)
            self.sealed_all = True
        sealed = found.sealed()
        kept = []
        for partition_log, pending in items:
            if self.sealed_all or (partition_log.topic, partition_log.partition) in sealed:
                partition_log.fence()
                partition_log.not_written(pending, KafkaError(
                    ErrorCode.not_leader_or_follower,
                    f"another gateway took {partition_log.topic}-{partition_log.partition} over"))
            else:
                kept.append((partition_log, pending))
        if sealed:
            log.warning("%s sealed %d partition(s) of this writer", found.key, len(sealed))
        return kept
