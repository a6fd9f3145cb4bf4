"""Transactions, sans-io: the coordinator's state machine per transactional id, the
transaction markers (control batches) it has written to each partition, and the
aborted-transaction index kept beside a partition's segments.

The state machine is Kafka's (TransactionMetadata): each request is a pure transition
from one stored state to the next, or a Kafka error. The commit point is the one
guarded write of PREPARE_COMMIT or PREPARE_ABORT to the metadata store; the markers
follow, and COMPLETE_* is written once every partition has its marker. Nothing here
does I/O: the gateway's coordinator stores each state and writes the markers.
"""

from __future__ import annotations

import bisect
import enum
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from .errors import ErrorCode, KafkaError
from .records import BatchHeader, Record, build_batch, iter_records

__all__ = ["TxnState", "TxnVersion", "Transaction", "Marker", "marker_batch", "read_marker", "AbortedTxn",
           "last_stable_offset", "MAX_EPOCH", "PartitionTransactions", "PendingOffset", "AbortedBatches",
           "aborted_overlapping"]

MAX_EPOCH = 2**15 - 1  # a producer epoch is an int16; at the last one the coordinator takes a new id
_MARKER_KEY = struct.Struct(">hh")  # version 0, type (0 abort, 1 commit)
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


class TxnVersion(enum.IntEnum):
    """The transaction protocol a client speaks (the ``transaction.version`` feature):
    V2 (KIP-890 part 2, Kafka 4.0) adds partitions and groups implicitly and bumps the
    producer's epoch at every EndTxn."""

    V1 = 1
    V2 = 2


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset committed within a transaction (TxnOffsetCommit), not yet visible."""

    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class Transaction:
    """One transactional id's state as stored (the metadata store's value)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    group_ids: frozenset[str] = field(default_factory=frozenset)  # AddOffsetsToTxn
    started_ms: int = -1  # when it became ONGOING
    updated_ms: int = -1
    # TxnOffsetCommit: offsets that become the groups' committed offsets at commit.
    offsets: tuple[PendingOffset, ...] = ()
    # Once prepared: the partitions whose owners wrote their marker, the groups whose
    # coordinators applied (or dropped) the pending offsets.
    partitions_done: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    groups_done: frozenset[str] = field(default_factory=frozenset)
    # Transactions v2 (KIP-890 part 2), where EndTxn bumps the epoch: the producer (id, epoch)
    # whose EndTxn prepared the last transaction (its retry is answered, not fenced), and the
    # producer a prepared transaction hands over to once complete: the next epoch, or a new
    # id at epoch 0 when the epochs of this id are used up.
    ended_by: tuple[int, int] | None = None
    next_producer: tuple[int, int] | None = None

    # -- requests --------------------------------------------------------------------

    def _check_producer(self, producer_id: int, producer_epoch: int) -> None:
        if producer_id != self.producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping,
                             f"{self.transactional_id!r} belongs to producer id {self.producer_id}")
        if producer_epoch != self.producer_epoch:
            raise KafkaError(ErrorCode.producer_fenced,
                             f"epoch {producer_epoch} of {self.transactional_id!r} was fenced by epoch "
                             f"{self.producer_epoch}")

    @property
    def epoch_exhausted(self) -> bool:
        """The next epoch would be the last: InitProducerId takes a new producer id."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def reinitialized(self, timeout_ms: int, now_ms: int, new_producer_id: int | None = None) -> Transaction:
        """InitProducerId for an id with no transaction in flight: the next epoch fences every
        older producer of this id (at the last epoch, ``new_producer_id`` starts over at 0)."""
        if self.state == TxnState.ONGOING or self.state.preparing:
            raise KafkaError(ErrorCode.concurrent_transactions, "a transaction of this id is still being finished")
        if self.epoch_exhausted:
            if new_producer_id is None:
                raise ValueError("the epoch is exhausted: a new producer id is needed")
            return replace(self, producer_id=new_producer_id, producer_epoch=0, timeout_ms=timeout_ms,
                           state=TxnState.EMPTY, partitions=frozenset(), group_ids=frozenset(), updated_ms=now_ms,
                           ended_by=None)
        return replace(self, producer_epoch=self.producer_epoch + 1, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                       partitions=frozenset(), group_ids=frozenset(), updated_ms=now_ms, ended_by=None)

    def aborted_for_fencing(self, now_ms: int) -> Transaction:
        """InitProducerId (or the timeout) while a transaction is ONGOING: it is aborted under
        a bumped epoch, so the old producer can neither add to it nor commit it."""
        if self.state != TxnState.ONGOING:
            raise KafkaError(ErrorCode.invalid_txn_state, f"no ongoing transaction to abort ({self.state.value})")
        return replace(self, producer_epoch=min(self.producer_epoch + 1, MAX_EPOCH), state=TxnState.PREPARE_ABORT,
                       updated_ms=now_ms, ended_by=None)

    def with_partitions(self, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]],
                        now_ms: int) -> Transaction:
        """AddPartitionsToTxn (and AddOffsetsToTxn's group partition)."""
        self._check_producer(producer_id, producer_epoch)
        if self.state.preparing:
            raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction is still being finished")
        added = frozenset(partitions)
        if self.state == TxnState.ONGOING:
            return replace(self, partitions=self.partitions | added, updated_ms=now_ms)
        return replace(self, state=TxnState.ONGOING, partitions=added, group_ids=frozenset(), offsets=(),
                       started_ms=now_ms, updated_ms=now_ms)

    def with_group(self, producer_id: int, producer_epoch: int, group_id: str, now_ms: int) -> Transaction:
        """AddOffsetsToTxn: the group's offsets commit or abort with the transaction."""
        self._check_producer(producer_id, producer_epoch)
        if self.state != TxnState.ONGOING:
            moved = self.with_partitions(producer_id, producer_epoch, (), now_ms)
            return replace(moved, group_ids=frozenset({group_id}))
        return replace(self, group_ids=self.group_ids | {group_id}, updated_ms=now_ms)

    def with_offsets(self, producer_id: int, producer_epoch: int, offsets: Iterable[PendingOffset],
                     now_ms: int, *, implicit: bool = False) -> Transaction:
        """TxnOffsetCommit: offsets of a group added to the transaction by AddOffsetsToTxn (or,
        ``implicit`` in transactions v2, by this request itself); a later offset of a
        partition replaces an earlier one."""
        added = list(offsets)
        if implicit:
            current = self
            for group_id in {o.group_id for o in added} - self.group_ids:
                current = current.with_group(producer_id, producer_epoch, group_id, now_ms)
            return current.with_offsets(producer_id, producer_epoch, added, now_ms)
        self._check_producer(producer_id, producer_epoch)
        if self.state != TxnState.ONGOING or any(o.group_id not in self.group_ids for o in added):
            raise KafkaError(ErrorCode.invalid_txn_state, "the group was not added to an ongoing transaction "
                             "(AddOffsetsToTxn first)")
        replaced = {(o.group_id, o.topic, o.partition) for o in added}
        kept = tuple(o for o in self.offsets if (o.group_id, o.topic, o.partition) not in replaced)
        return replace(self, offsets=kept + tuple(added), updated_ms=now_ms)

    def ending(self, producer_id: int, producer_epoch: int, commit: bool, now_ms: int) -> Transaction | None:
        """EndTxn of transactions v1: the PREPARE_* state to store (the commit point), or
        ``None`` when the transaction already ended this way (a retry, answered NONE)."""
        self._check_producer(producer_id, producer_epoch)
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.state == TxnState.ONGOING:
            return replace(self, state=wanted, updated_ms=now_ms, ended_by=None)
        if self.state == done:
            return None
        if self.state == wanted:
            raise KafkaError(ErrorCode.concurrent_transactions, "the transaction is still being finished")
        raise KafkaError(ErrorCode.invalid_txn_state,
                         f"cannot {'commit' if commit else 'abort'} in state {self.state.value}")

    def ending_v2(self, producer_id: int, producer_epoch: int, commit: bool, now_ms: int,
                  new_producer_id: int | None = None) -> Transaction | None:
        """EndTxn of transactions v2 (KIP-890 part 2): prepared under the next epoch, which
        its markers carry and its producer is given back, so a late batch of the ended
        transaction is fenced in every partition. An abort with nothing begun is allowed
        (the client cannot know whether its batches reached a partition) and bumps the epoch
        too. ``None`` for a retry of the EndTxn that ended the transaction this way (answered
        with the producer it was given). At the last epochs ``new_producer_id`` is needed
        (:attr:`epoch_exhausted`): the markers take the last epoch, the producer a new id."""
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.ended_by == (producer_id, producer_epoch) and self.state in (wanted, done):
            if self.state == wanted:
                raise KafkaError(ErrorCode.concurrent_transactions, "the transaction is still being finished")
            return None
        self._check_producer(producer_id, producer_epoch)
        if self.state.preparing:
            raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction is still being finished")
        if self.state != TxnState.ONGOING and commit:
            raise KafkaError(ErrorCode.invalid_txn_state, f"cannot commit in state {self.state.value}")
        if self.epoch_exhausted:
            if new_producer_id is None:
                raise ValueError("the epoch is exhausted: a new producer id is needed")
            following = (new_producer_id, 0)
        else:
            following = (self.producer_id, self.producer_epoch + 1)
        begun = self.state == TxnState.ONGOING
        return replace(self, producer_epoch=self.producer_epoch + 1, state=wanted, updated_ms=now_ms,
                       partitions=self.partitions if begun else frozenset(),
                       group_ids=self.group_ids if begun else frozenset(), offsets=self.offsets if begun else (),
                       ended_by=(producer_id, producer_epoch), next_producer=following)

    @property
    def producer_after(self) -> tuple[int, int]:
        """The producer id and epoch a client of transactions v2 is given by EndTxn."""
        return self.next_producer or (self.producer_id, self.producer_epoch)

    @property
    def committing(self) -> bool:
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)

    def with_done(self, partitions: Iterable[tuple[str, int]], groups: Iterable[str], now_ms: int) -> Transaction:
        """Some partitions have their marker, some groups their offsets; COMPLETE_* once all do."""
        if not self.state.preparing:
            raise KafkaError(ErrorCode.invalid_txn_state, f"nothing to complete in state {self.state.value}")
        done = replace(self, partitions_done=self.partitions_done | (frozenset(partitions) & self.partitions),
                       groups_done=self.groups_done | (frozenset(groups) & self.group_ids), updated_ms=now_ms)
        return done.completed(now_ms) if done.all_done else done

    @property
    def all_done(self) -> bool:
        return self.partitions <= self.partitions_done and self.group_ids <= self.groups_done

    def completed(self, now_ms: int) -> Transaction:
        """Every partition has its marker (and the groups their offsets): COMPLETE_*."""
        if not self.state.preparing:
            raise KafkaError(ErrorCode.invalid_txn_state, f"nothing to complete in state {self.state.value}")
        state = TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        producer_id, producer_epoch = self.producer_after
        return replace(self, state=state, partitions=frozenset(), group_ids=frozenset(), offsets=(),
                       partitions_done=frozenset(), groups_done=frozenset(), updated_ms=now_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, next_producer=None)

    def expired(self, now_ms: int) -> bool:
        """An ONGOING transaction past its timeout, which the coordinator aborts."""
        return self.state == TxnState.ONGOING and now_ms - self.started_ms > self.timeout_ms

    # -- stored form ---------------------------------------------------------------------

    def to_json(self) -> bytes:
        return json.dumps({"id": self.transactional_id, "pid": self.producer_id, "epoch": self.producer_epoch, "timeout_ms": self.timeout_ms,
                           "state": self.state.value, "partitions": sorted([t, p] for t, p in self.partitions),
                           "groups": sorted(self.group_ids), "started_ms": self.started_ms,
                           "updated_ms": self.updated_ms,
                           "offsets": [[o.group_id, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata]
                                       for o in self.offsets],
                           "partitions_done": sorted([t, p] for t, p in self.partitions_done),
                           "groups_done": sorted(self.groups_done),
                           "ended_by": self.ended_by and list(self.ended_by),
                           "next": self.next_producer and list(self.next_producer)}).encode()

    @classmethod
    def from_json(cls, transactional_id: str | None, raw: bytes) -> Transaction:
        """``ValueError`` if ``raw`` is not a stored transaction (of ``transactional_id``; of
        the id it holds when that is None: an object named by a digest of its id)."""
        try:
            data = json.loads(raw)
            held = data.get("id")  # absent from documents written before ids were kept in them
            if transactional_id is None:
                transactional_id = str(held) if held is not None else None
                if transactional_id is None:
                    raise ValueError("it names no transactional id")
            elif held is not None and held != transactional_id:
                raise ValueError(f"it holds the transaction of {held!r}")
            return cls(transactional_id, int(data["pid"]), int(data["epoch"]), int(data["timeout_ms"]),
                       TxnState(data["state"]), frozenset((str(t), int(p)) for t, p in data["partitions"]),
                       frozenset(str(g) for g in data["groups"]), int(data["started_ms"]), int(data["updated_ms"]),
                       tuple(PendingOffset(str(g), str(t), int(p), int(o), int(e), None if m is None else str(m))
                             for g, t, p, o, e, m in data.get("offsets", ())),
                       frozenset((str(t), int(p)) for t, p in data.get("partitions_done", ())),
                       frozenset(str(g) for g in data.get("groups_done", ())),
                       _producer(data.get("ended_by")), _producer(data.get("next")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a stored transaction: {exc!r}") from exc


def _producer(stored) -> tuple[int, int] | None:
    if stored is None:
        return None
    producer_id, producer_epoch = stored
    return int(producer_id), int(producer_epoch)


@dataclass(frozen=True, slots=True)
class Marker:
    commit: bool
    coordinator_epoch: int


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """Kafka's end-transaction marker: a control batch of one record (base offset 0, to be
    stamped when it is appended)."""
    record = Record(0, timestamp_ms, _MARKER_KEY.pack(0, 1 if commit else 0), _MARKER_VALUE.pack(0, coordinator_epoch))
    return build_batch([record], base_timestamp=timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
                       transactional=True, control=True)


def read_marker(data: bytes | memoryview, header: BatchHeader) -> Marker:
    """The marker of a control batch; ``ValueError`` if it holds none."""
    if not (header.is_control and header.records_count == 1):
        raise ValueError("not a transaction marker batch")
    [record] = list(iter_records(data, header))
    if record.key is None or len(record.key) < _MARKER_KEY.size or record.value is None \
            or len(record.value) < _MARKER_VALUE.size:
        raise ValueError("a control record without a marker key and value")
    _, kind = _MARKER_KEY.unpack_from(record.key)
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(record.value)
    if kind not in (0, 1):
        raise ValueError(f"control record type {kind} is not a transaction marker")
    return Marker(kind == 1, coordinator_epoch)


@dataclass(frozen=True, slots=True, order=True)
class AbortedTxn:
    """An aborted transaction's span in one partition (Kafka's .txnindex entry): readers
    under read_committed drop its producer's records from ``first_offset`` to its marker
    at ``last_offset``."""

    first_offset: int
    last_offset: int
    producer_id: int
    last_stable_offset: int


class AbortedBatches:
    """Which stored batches belong to aborted transactions: a transactional data batch of an
    aborted producer from its span's first offset to its marker (what read_committed
    consumers drop, and the cleaner removes)."""

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        self._spans: dict[int, list[tuple[int, int]]] = {}
        for entry in sorted(entries):
            spans = self._spans.setdefault(entry.producer_id, [])
            if spans and entry.first_offset <= spans[-1][1]:  # joined: one lookup finds either
                spans[-1] = (spans[-1][0], max(spans[-1][1], entry.last_offset))
            else:
                spans.append((entry.first_offset, entry.last_offset))

    def __contains__(self, header: BatchHeader) -> bool:
        spans = self._spans.get(header.producer_id)
        if not spans or not header.is_transactional or header.is_control:
            return False
        at = bisect.bisect_right(spans, (header.base_offset, 2**63)) - 1
        return at >= 0 and spans[at][0] <= header.base_offset <= spans[at][1]


def aborted_overlapping(entries: Iterable[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions a read of ``[start, end)`` must be told of (Kafka's
    ``aborted_transactions``): those that end at or after ``start`` and began before ``end``."""
    return [entry for entry in entries if entry.last_offset >= start and entry.first_offset < end]


def last_stable_offset(high_watermark: int, open_first_offsets: Iterable[int]) -> int:
    """The first offset of the oldest transaction still open, or the high watermark:
    read_committed consumers read up to here."""
    return min(open_first_offsets, default=high_watermark)


class PartitionTransactions:
    """One partition's transactions as its log is appended to (Kafka's producer state and
    transaction index): where each producer's open transaction began, the aborted ones
    closed so far, and the last stable offset.

    Its stored form (:meth:`encode`, beside the partition's segments) is written by the
    partition's owner after each marker and after a transaction's first batch in the
    partition is durable, so a gateway loading the partition (or Spark reading it) needs
    only that object and the batches from its ``end`` on.
    """

    def __init__(self, open_: dict[int, int] | None = None, aborted: list[AbortedTxn] | None = None,
                 end: int = 0) -> None:
        self.open: dict[int, int] = dict(open_ or {})  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = list(aborted or [])
        self.end = end  # the offsets below are reflected here (for a stored state: read on from here)

    def appended(self, header: BatchHeader, data: bytes | memoryview | None = None) -> bool:
        """A stored batch at its final offsets (``data`` holds it, for a marker's type);
        returns whether it began a transaction in this partition."""
        self.end = max(self.end, header.last_offset + 1)
        if not header.is_transactional:
            return False
        if header.is_control:
            if data is None:
                raise ValueError("a marker's batch is needed to know whether it commits")
            # ``data`` is the batch alone: its header's position is where it was, not 0.
            marker = read_marker(data, header.at(position=0))
            self.marker_appended(header.producer_id, header.last_offset, marker.commit)
            return False
        if header.producer_id in self.open:
            return False
        self.open[header.producer_id] = header.base_offset
        return True

    def marker_appended(self, producer_id: int, offset: int, commit: bool) -> None:
        self.end = max(self.end, offset + 1)
        first = self.open.pop(producer_id, None)
        if first is not None and not commit:
            self.aborted.append(AbortedTxn(first, offset, producer_id, self.last_stable_offset(offset + 1)))

    def forget_aborted_below(self, offset: int) -> int:
        """Drop the aborted transactions whose every offset is below ``offset``; how many."""
        kept = [entry for entry in self.aborted if entry.last_offset >= offset]
        dropped = len(self.aborted) - len(kept)
        self.aborted = kept
        return dropped

    def discard_from(self, offset: int) -> None:
        """Appends from ``offset`` on were never stored: transactions they opened are not open."""
        self.open = {pid: first for pid, first in self.open.items() if first < offset}
        self.end = min(self.end, offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        return last_stable_offset(high_watermark, self.open.values())

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[start, end)`` must be told of."""
        return aborted_overlapping(self.aborted, start, end)

    def encode(self, log_start: int, high_watermark: int, owner: str = "") -> bytes:
        """The stored form of what is durable (below ``high_watermark``: a transaction opened
        by a batch still being written is not stored as open); aborted transactions wholly
        below ``log_start`` are gone with their data. ``owner`` makes the writer's form its own."""
        return json.dumps({"version": 1, "owner": owner, "end": min(self.end, high_watermark),
                           "open": {str(p): f for p, f in sorted(self.open.items()) if f < high_watermark},
                           "aborted": [[e.first_offset, e.last_offset, e.producer_id, e.last_stable_offset]
                                       for e in sorted(self.aborted) if e.last_offset >= log_start]}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PartitionTransactions:
        """``ValueError`` if ``raw`` is not a stored partition transaction state."""
        try:
            data = json.loads(raw)
            if data.get("version") != 1:
                raise ValueError(f"unknown version {data.get('version')!r}")
            return cls({int(p): int(f) for p, f in data["open"].items()},
                       [AbortedTxn(int(f), int(last), int(p), int(s)) for f, last, p, s in data["aborted"]],
                       int(data["end"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a stored partition transaction state: {exc!r}") from exc
