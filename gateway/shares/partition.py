"""One share-partition's record states (KIP-932), as pure transitions: no I/O, no clock.

Offsets below ``start`` (Kafka's share-partition start offset) are done with. Offsets from
``start`` up to ``end`` (the end offset) are in flight: each is available (never fetched, or
given back), acquired by one member until its lock expires, acknowledged, or archived
(rejected, out of deliveries, or not a record: a gap or a transaction marker). Offsets from
``end`` on have never been acquired. ``start`` moves over acknowledged and archived records.

``version`` counts the changes the durable state must keep (acknowledgements, archives,
releases, a moved start); acquisitions are not among them, as in Kafka: a gateway that dies
loses at most the acquisitions in flight, whose records are then delivered again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kafscale.protocol.errors import ErrorCode, KafkaError

__all__ = ["RecordState", "AckType", "StateBatch", "Acquired", "Acknowledgement", "LogBatch", "SharePartition",
           "Limits"]


class RecordState(IntEnum):
    """As Kafka numbers them in the share-group state it persists."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    GAP = 0  # no record at this offset: archived
    ACCEPT = 1
    RELEASE = 2  # given back: delivered again, until the delivery limit
    REJECT = 3  # never delivered again
    RENEW = 4  # the lock extended (ShareFetch/ShareAcknowledge v2)


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets in one durable state, with their delivery count."""

    first: int
    last: int
    state: RecordState
    deliveries: int


@dataclass(frozen=True, slots=True)
class Acquired:
    """Offsets ``first``..``last`` acquired for a member, each delivered ``deliveries`` times now."""

    first: int
    last: int
    deliveries: int


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """Offsets ``first``..``last`` acknowledged with one type, or one type per offset."""

    first: int
    last: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What acquisition needs to know of a record batch read from the log."""

    first: int
    last: int
    control: bool  # a transaction marker: never delivered, archived


@dataclass(frozen=True, slots=True)
class Limits:
    lock_s: float  # share.record.lock.duration.ms
    delivery_limit: int  # share.delivery.count.limit
    max_in_flight: int  # group.share.partition.max.record.locks


@dataclass(slots=True)
class _Record:
    state: RecordState
    deliveries: int
    member: str = ""
    lock_until: float = 0.0


class SharePartition:
    def __init__(self, start: int, batches: Iterable[StateBatch] = (), *, state_epoch: int = 0) -> None:
        self.start = start
        self.end = start
        self.state_epoch = state_epoch  # raised when the start is set by an administrator
        self.version = 0
        self._records: dict[int, _Record] = {}
        self._locks_end_from = float("inf")  # no lock ends before this (the timer's scans skip until then)
        for batch in batches:
            for offset in range(max(batch.first, start), batch.last + 1):
                state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
                self._records[offset] = _Record(state, batch.deliveries)
            self.end = max(self.end, batch.last + 1)
        self._advance()

    # -- what the driver asks -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self.end - self.start

    def next_wanted(self) -> int:
        """Where a fetch reads the log: the first offset it may acquire."""
        for offset in range(self.start, self.end):
            record = self._records.get(offset)
            if record is None or record.state is RecordState.AVAILABLE:
                return offset
        return self.end

    def done_in_flight(self) -> int:
        """In-flight records accepted or archived (past an unfinished one at the start)."""
        return sum(1 for r in self._records.values() if r.state in _DONE)

    def acquired_by(self, member: str) -> list[int]:
        return [o for o, r in self._records.items() if r.state is RecordState.ACQUIRED and r.member == member]

    def next_expiry(self) -> float | None:
        locks = [r.lock_until for r in self._records.values() if r.state is RecordState.ACQUIRED]
        return min(locks) if locks else None

    def states(self) -> list[StateBatch]:
        """The durable view: runs of offsets at or past ``start`` that are not plain available.
        An acquired record is kept as available with its delivery count (its lock dies with
        the gateway)."""
        runs: list[StateBatch] = []
        for offset in sorted(self._records):
            record = self._records[offset]
            state = RecordState.AVAILABLE if record.state is RecordState.ACQUIRED else record.state
            if state is RecordState.AVAILABLE and record.deliveries == 0:
                continue
            last = runs[-1] if runs else None
            if last is not None and last.last == offset - 1 and last.state is state and last.deliveries == record.deliveries:
                runs[-1] = StateBatch(last.first, offset, state, record.deliveries)
            else:
                runs.append(StateBatch(offset, offset, state, record.deliveries))
        return runs

    # -- transitions ----------------------------------------------------------------------

    def acquire(self, member: str, batches: Sequence[LogBatch], read_from: int, max_records: int, now: float,
                limits: Limits) -> list[Acquired]:
        """Acquire for ``member`` the available records among ``batches``, read from the log
        at ``read_from`` in offset order: at most ``max_records``, none past ``start`` +
        ``max_in_flight``. Offsets the read passed over without a batch (removed by the
        cleaner) are archived, as are transaction markers."""
        taken: list[Acquired] = []
        records = self._records
        lock_until = now + limits.lock_s
        count = 0
        expected = max(read_from, self.start)
        ceiling = self.start + limits.max_in_flight
        for batch in batches:
            if count >= max_records:
                break
            for missing in range(expected, min(batch.first, ceiling)):
                self._archive(missing)
            expected = max(expected, batch.last + 1)
            offset, high = max(batch.first, self.start), min(batch.last + 1, ceiling)
            if batch.control:
                for marker in range(offset, high):
                    self._archive(marker)
                continue
            # In flight already: record by record.
            while offset < high and offset < self.end and count < max_records:
                record = records.get(offset)
                if record is None:  # never fetched, or fetched and not stored before a restart
                    record = records[offset] = _Record(RecordState.AVAILABLE, 0)
                if record.state is RecordState.AVAILABLE:
                    record.state, record.member, record.lock_until = RecordState.ACQUIRED, member, lock_until
                    record.deliveries += 1
                    _take(taken, offset, offset, record.deliveries)
                    count += 1
                offset += 1
            # Never acquired: all at once, a first delivery each.
            if offset >= self.end and offset < high and count < max_records:
                fresh_end = min(high, offset + max_records - count)
                for fresh in range(offset, fresh_end):
                    records[fresh] = _Record(RecordState.ACQUIRED, 1, member, lock_until)
                _take(taken, offset, fresh_end - 1, 1)
                count += fresh_end - offset
                self.end = fresh_end
        if taken:
            self._locks_end_from = min(self._locks_end_from, lock_until)
        self._advance()
        return taken

    def acknowledge(self, member: str, batches: Sequence[Acknowledgement], now: float, limits: Limits) -> bool:
        """Apply a member's acknowledgements of this partition: all of them, or (KafkaError,
        nothing applied) none. Each record must be held by ``member``. Whether a fetch may
        now acquire more (a record given back, or the start moved: room in flight)."""
        for batch in batches:
            self._check(member, batch)
        start = self.start
        freed = False
        for batch in batches:
            kinds = [AckType(t) for t in batch.types]
            for offset in range(batch.first, batch.last + 1):
                kind = kinds[0] if len(kinds) == 1 else kinds[offset - batch.first]
                record = self._records[offset]
                if kind is AckType.RENEW:
                    record.lock_until = now + limits.lock_s
                    continue
                if kind is AckType.ACCEPT:
                    record.state = RecordState.ACKNOWLEDGED
                elif kind is AckType.RELEASE:
                    self._release(record, limits)
                    freed = True
                else:  # REJECT, GAP
                    record.state = RecordState.ARCHIVED
                record.member = ""
            self.version += 1
        self._advance()
        return freed or self.start != start

    def _check(self, member: str, batch: Acknowledgement) -> None:
        first, last, types = batch.first, batch.last, batch.types
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            raise KafkaError(ErrorCode.invalid_request, f"acknowledgement batch {first}..{last} with "
                                                        f"{len(types)} types")
        for kind in types:
            if kind not in AckType._value2member_map_:
                raise KafkaError(ErrorCode.invalid_request, f"unknown acknowledge type {kind}")
        if first < self.start or last >= self.end:  # (checked first: a range may be absurdly long)
            raise KafkaError(ErrorCode.invalid_record_state,
                             f"offsets {first}..{last} are not all in flight ({self.start}..{self.end - 1})")
        records = self._records
        for offset in range(first, last + 1):
            record = records.get(offset)
            if record is None or record.state is not RecordState.ACQUIRED or record.member != member:
                raise KafkaError(ErrorCode.invalid_record_state,
                                 f"offset {offset} is not acquired by this member")

    def release_member(self, member: str, limits: Limits) -> int:
        """Give back what ``member`` holds (it left, or closed its share session)."""
        released = 0
        for record in self._records.values():
            if record.state is RecordState.ACQUIRED and record.member == member:
                self._release(record, limits)
                released += 1
        if released:
            self.version += 1
            self._advance()
        return released

    def expire(self, now: float, limits: Limits) -> int:
        """Give back the records whose locks ended by ``now``."""
        if now < self._locks_end_from:
            return 0
        expired = 0
        self._locks_end_from = float("inf")
        for record in self._records.values():
            if record.state is not RecordState.ACQUIRED:
                continue
            if record.lock_until <= now:
                self._release(record, limits)
                expired += 1
            else:
                self._locks_end_from = min(self._locks_end_from, record.lock_until)
        if expired:
            self.version += 1
            self._advance()
        return expired

    def trim(self, log_start: int) -> None:
        """The log's start moved (retention, deleted records): what it passed is gone, as if
        archived."""
        if log_start <= self.start:
            return
        for offset in [o for o in self._records if o < log_start]:
            del self._records[offset]
        self.start = log_start
        self.end = max(self.end, log_start)
        self.version += 1
        self._advance()

    def reset(self, start: int) -> None:
        """An administrator set the start (AlterShareGroupOffsets): everything in flight goes."""
        self._records.clear()
        self.start = self.end = start
        self.state_epoch += 1
        self.version += 1

    # -- internals ------------------------------------------------------------------------

    def _release(self, record: _Record, limits: Limits) -> None:
        record.member = ""
        record.state = RecordState.ARCHIVED if record.deliveries >= limits.delivery_limit else RecordState.AVAILABLE

    def _archive(self, offset: int) -> None:
        if offset < self.start:
            return
        record = self._records.get(offset)
        if record is None:
            self._records[offset] = _Record(RecordState.ARCHIVED, 0)
        elif record.state is RecordState.AVAILABLE:
            record.state = RecordState.ARCHIVED
        else:
            return
        self.end = max(self.end, offset + 1)
        self.version += 1

    def _advance(self) -> None:
        start = self.start
        while (record := self._records.get(start)) is not None and record.state in _DONE:
            del self._records[start]
            start += 1
        if start != self.start:
            self.start = start
            self.version += 1
        self.end = max(self.end, self.start)


def _take(taken: list[Acquired], first: int, last: int, deliveries: int) -> None:
    """Add offsets ``first``..``last`` to the runs acquired, joining the last run if they follow it."""
    previous = taken[-1] if taken else None
    if previous is not None and previous.last == first - 1 and previous.deliveries == deliveries:
        taken[-1] = Acquired(previous.first, last, deliveries)
    else:
        taken.append(Acquired(first, last, deliveries))
