"""One loaded partition's transactions, kept by the gateway that owns it (Kafka's producer
state and transaction index): which producers have a transaction open here and from
where, the aborted transactions' spans, and the last stable offset.

Stored beside the partition's segments (``transactions.json``, docs/formats.md) with a
conditional write on the version this owner read: before the first batch of a
transaction here is acknowledged, and after each marker is durable. A marker is written
once per transaction (:meth:`TransactionBook.write_marker`), whoever asks and however
often. Loading the stored state is :mod:`.recovery`'s job.
"""

from __future__ import annotations

import uuid
from typing import Protocol

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.records import BatchHeader, split_batches
from kafscale.protocol.transactions import PartitionTransactions, marker_batch
from kafscale.storage_backends import ObjectChanged, ObjectExists, ObjectNotFound, StorageError

from ..clock import Clock
from ..storage import AsyncStore

__all__ = ["TransactionBook", "BookedLog", "VerificationGuards"]


class Appended(Protocol):
    """What waits for an append to be durable (the partition log's flush ticket)."""

    async def wait(self) -> None: ...


class BookedLog(Protocol):
    """What the book needs of its partition's log."""

    topic: str
    partition: int
    high_watermark: int
    log_start_offset: int

    def append(self, record_set: bytearray, headers: list[BatchHeader], *, urgent: bool = False) -> tuple[int, Appended]:
        ...

    def writable(self) -> bool: ...

    @property
    def clock(self) -> Clock: ...

    def fence(self) -> None: ...

    def wake_readers(self) -> None: ...


class VerificationGuards:
    """KIP-890 per partition: a producer's first batch here is appended only if its
    transaction is ongoing and holds the partition, checked with the coordinator while the
    batch waits. The check begins a guard; a marker of that producer written meanwhile takes
    it away, so the batch (begun before the marker) cannot land after it."""

    def __init__(self) -> None:
        self._guards: dict[int, object] = {}

    def begin(self, producer_id: int) -> object:
        guard = self._guards[producer_id] = object()
        return guard

    def holds(self, producer_id: int, guard: object) -> bool:
        return self._guards.get(producer_id) is guard

    def end(self, producer_id: int, guard: object) -> None:
        if self.holds(producer_id, guard):
            del self._guards[producer_id]

    def revoke(self, producer_id: int) -> None:
        """A marker of the producer was written: no batch checked before it may follow it."""
        self._guards.pop(producer_id, None)


class TransactionBook:
    def __init__(self, store: AsyncStore, key: str, log: BookedLog) -> None:
        self._store = store
        self.key = key
        self._log = log
        self.state = PartitionTransactions()
        self.verification = VerificationGuards()
        self.open_since: dict[int, float] = {}  # trio time each open transaction was first seen here
        self._markers = trio.Lock()
        self._changes = self._persisted = 0
        self._persisting = trio.Lock()
        self._version: str | None = None  # of the stored state this owner last read or wrote
        self._owner_token = uuid.uuid4().hex  # makes this owner's stored states its own

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below here: the oldest open transaction's first offset
        (never below the log start: retention or DeleteRecords may remove its first records)."""
        return max(self.state.last_stable_offset(self._log.high_watermark), self._log.log_start_offset)

    def restore(self, state: PartitionTransactions, stored_version: str | None, *, changed: bool) -> None:
        """The state rebuilt at load; ``changed``: it differs from the stored one."""
        self.state = state
        self._version = stored_version
        self._persisted = 0
        self._changes = 1 if changed else 0
        self.open_since = dict.fromkeys(state.open, trio.current_time())

    async def forget_aborted_below(self, offset: int) -> None:
        """The aborted transactions wholly below ``offset`` left nothing a reader must skip
        (the cleaner removed their records): dropped, and the state stored without them."""
        if self.state.forget_aborted_below(offset):
            self._changes += 1
            await self.persist()

    def appended(self, header: BatchHeader) -> None:
        """A batch was given its offsets (not durable yet)."""
        if header.is_transactional and not header.is_control and self.state.appended(header):
            self._changes += 1  # stored before the batch is acknowledged (:meth:`persist`)
            self.open_since[header.producer_id] = trio.current_time()

    def not_written(self, high_watermark: int) -> None:
        """Appends from ``high_watermark`` on will never be stored."""
        self.state.discard_from(high_watermark)
        self.open_since = {pid: since for pid, since in self.open_since.items() if pid in self.state.open}

    async def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int = 0) -> bool:
        """Append the COMMIT or ABORT marker of ``producer_id``'s open transaction, durably,
        and store the state; ``False`` when it has none open here (its marker is already
        written, or it never wrote a batch here)."""
        log = self._log
        async with self._markers:
            self.verification.revoke(producer_id)
            if producer_id not in self.state.open:
                if not log.writable():  # what this log knows may be stale: its new owner's answer counts
                    raise KafkaError(ErrorCode.not_leader_or_follower, f"{log.topic}-{log.partition} moved")
                return False
            batch = bytearray(marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                           log.clock.now_ms()))
            offset, ticket = log.append(batch, split_batches(batch), urgent=True)
            await ticket.wait()
            self.state.marker_appended(producer_id, offset, commit)
            self.open_since.pop(producer_id, None)
            self._changes += 1
            log.wake_readers()  # read_committed fetches waiting at the old last stable offset
        await self.persist()
        return True

    async def persist(self) -> None:
        """Store the state if it changed (a transaction began here, or a marker was written):
        a conditional write on the version this owner read, so a former owner's late write
        can never replace a newer owner's (the loser is fenced)."""
        if self._persisted >= self._changes:
            return
        log = self._log
        async with self._persisting:
            wanted = self._changes
            if self._persisted >= wanted:
                return
            if not log.writable():
                raise KafkaError(ErrorCode.not_leader_or_follower, f"{log.topic}-{log.partition} moved")
            data = self.state.encode(log.log_start_offset, log.high_watermark, self._owner_token)
            try:
                if self._version is None:
                    version = await self._store.put_if_absent(self.key, data)
                else:
                    version = await self._store.put_if_unchanged(self.key, data, self._version)
                if not version:  # the store did not say: read it back (the owner token makes it ours)
                    stored, version = await self._store.get_versioned(self.key)
                    if stored != data:
                        raise ObjectChanged(self.key)
            except (ObjectExists, ObjectChanged, ObjectNotFound):
                log.fence()
                raise KafkaError(ErrorCode.not_leader_or_follower,
                                 f"another gateway wrote {self.key}: {log.topic}-{log.partition} moved") from None
            except StorageError as exc:
                raise KafkaError(ErrorCode.kafka_storage_error, f"storing {self.key}: {exc}") from exc
            self._version = version
            self._persisted = wanted
