"""Idempotent-producer state of one partition: the last sequences of each producer id.

Kept in memory: duplicates of the last five batches of a producer are answered
with their original offsets, gaps are OUT_OF_ORDER_SEQUENCE_NUMBER, older epochs
are fenced. When a partition is loaded (restart, or a new owner in a cluster) the
state is rebuilt from the batches of its newest segments (``producer_scan_bytes``);
a producer not seen there is unknown and its next batch is accepted as is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.records import BatchHeader

__all__ = ["ProducerStates", "Duplicate"]

Ticket = TypeVar("Ticket")  # what waits for a batch to be stored (the partition log's flush ticket)

_RECENT = 5  # Kafka keeps the metadata of a producer's last five batches
_INT32 = 2**31


@dataclass(slots=True)
class _Entry(Generic[Ticket]):
    first_sequence: int
    last_sequence: int
    base_offset: int
    ticket: Ticket


@dataclass(slots=True)
class _Producer(Generic[Ticket]):
    epoch: int
    recent: deque[_Entry[Ticket]] = field(default_factory=lambda: deque(maxlen=_RECENT))


@dataclass(frozen=True, slots=True)
class Duplicate(Generic[Ticket]):
    base_offset: int
    ticket: Ticket


class ProducerStates(Generic[Ticket]):
    def __init__(self) -> None:
        self._producers: dict[int, _Producer[Ticket]] = {}

    def check(self, header: BatchHeader) -> Duplicate[Ticket] | None:
        """Raise for a fenced or out-of-order batch; return the original of a duplicate."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        state = self._producers.get(header.producer_id)
        if state is None:
            return None
        if header.producer_epoch < state.epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch,
                             f"producer {header.producer_id} epoch {header.producer_epoch} is fenced")
        if header.producer_epoch > state.epoch:
            if header.base_sequence != 0:
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 "a new producer epoch must start at sequence 0")
            return None
        last_sequence = (header.base_sequence + header.last_offset_delta) % _INT32
        for entry in state.recent:
            if entry.first_sequence == header.base_sequence and entry.last_sequence == last_sequence:
                return Duplicate(entry.base_offset, entry.ticket)
        if state.recent:
            expected = (state.recent[-1].last_sequence + 1) % _INT32
            if header.base_sequence != expected:
                raise KafkaError(ErrorCode.out_of_order_sequence_number,
                                 f"expected sequence {expected}, got {header.base_sequence}")
        return None

    def record(self, header: BatchHeader, ticket: Ticket) -> None:
        if header.is_control and header.producer_id >= 0:
            self._marker(header.producer_id, header.producer_epoch)
            return
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        state = self._producers.get(header.producer_id)
        if state is None or header.producer_epoch > state.epoch:
            state = self._producers[header.producer_id] = _Producer(header.producer_epoch)
        last_sequence = (header.base_sequence + header.last_offset_delta) % _INT32
        state.recent.append(_Entry(header.base_sequence, last_sequence, header.base_offset, ticket))

    def _marker(self, producer_id: int, epoch: int) -> None:
        """A transaction marker: under transactions v2 it carries the producer's next epoch
        (KIP-890 part 2), which from here on fences the older one; the new epoch's batches
        begin a new sequence."""
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            self._producers[producer_id] = _Producer(epoch)

    def epoch_of(self, producer_id: int) -> int | None:
        """The newest epoch of ``producer_id`` seen here (``None``: not known here)."""
        state = self._producers.get(producer_id)
        return None if state is None else state.epoch

    def describe(self) -> list[tuple[int, int, int]]:
        """(producer id, epoch, last sequence) of each producer known here (DescribeProducers)."""
        return [(pid, state.epoch, state.recent[-1].last_sequence if state.recent else -1)
                for pid, state in self._producers.items()]

    def discard_from(self, offset: int) -> None:
        """After a failed flush: batches at ``offset`` or later were not written. A producer
        left with none of its recent batches is unknown again (its retry is accepted as is)."""
        for producer_id in list(self._producers):
            recent = self._producers[producer_id].recent
            while recent and recent[-1].base_offset >= offset:
                recent.pop()
            if not recent:
                del self._producers[producer_id]
