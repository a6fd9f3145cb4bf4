"""The transaction coordinator: requests become guarded writes of a transaction's state.

Each request reads the transactional id's stored state, computes the next one with the
pure transitions of :mod:`kafscale.protocol.transactions`, and writes it with a
compare-and-swap on the version read; a lost swap (another coordinator wrote first)
reads again and decides anew, so the stored state only ever moves along Kafka's
state machine. EndTxn answers once PREPARE_COMMIT or PREPARE_ABORT is stored (the
commit point, as in Kafka); the markers are then written to every partition of the
transaction by a :class:`MarkerWriter` and COMPLETE_* stored, in the background, and
by :meth:`TransactionCoordinator.resume` for transactions a dead coordinator left
prepared. Not yet served: the Kafka handlers and the marker writer come next.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.transactions import Transaction, TxnState

from .store import ABSENT, StoredTransaction, TransactionChanged, TransactionStore

__all__ = ["MarkerWriter", "TransactionCoordinator", "MAX_TIMEOUT_MS"]

log = logging.getLogger("kafscale.transactions")

MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
_ATTEMPTS = 5


class MarkerWriter(Protocol):
    async def write_markers(self, transaction: Transaction) -> None:
        """Append the COMMIT or ABORT marker of the prepared ``transaction`` to each of its
        partitions, exactly once per partition, durably; raise if any could not be."""
        ...


class TransactionCoordinator:
    def __init__(self, store: TransactionStore, new_producer_id: Callable[[], Awaitable[int]],
                 markers: MarkerWriter, clock_ms: Callable[[], int], max_timeout_ms: int = MAX_TIMEOUT_MS) -> None:
        self._store = store
        self._new_producer_id = new_producer_id
        self._markers = markers
        self._clock_ms = clock_ms
        self.max_timeout_ms = max_timeout_ms

    async def _change(self, transactional_id: str,
                      step: Callable[[StoredTransaction | None], Awaitable[Transaction | None]]) -> Transaction | None:
        """Read, decide, swap; again from the new state if another coordinator wrote first."""
        for _ in range(_ATTEMPTS):
            stored = await self._store.get(transactional_id)
            wanted = await step(stored)
            if wanted is None:
                return stored.transaction if stored else None
            try:
                await self._store.put(wanted, stored.version if stored else ABSENT)
            except TransactionChanged:
                continue
            return wanted
        raise KafkaError(ErrorCode.concurrent_transactions, f"{transactional_id!r} keeps changing; retry")

    async def init_producer_id(self, transactional_id: str, timeout_ms: int) -> Transaction:
        """InitProducerId with a transactional id: the id's producer under a new epoch,
        which fences every older producer of it. An ongoing transaction is aborted first
        (the client retries on CONCURRENT_TRANSACTIONS until its markers are written)."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise KafkaError(ErrorCode.invalid_transaction_timeout,
                             f"transaction.timeout.ms {timeout_ms} is not in (0, {self.max_timeout_ms}]")
        now = self._clock_ms()

        async def step(stored: StoredTransaction | None) -> Transaction | None:
            if stored is None:
                return Transaction(transactional_id, await self._new_producer_id(), 0, timeout_ms, updated_ms=now)
            current = stored.transaction
            if current.state.preparing:
                return None  # still being finished: finished below, then the client retries
            if current.state == TxnState.ONGOING:
                return current.aborted_for_fencing(now)
            if current.epoch_exhausted:
                return current.reinitialized(timeout_ms, now, await self._new_producer_id())
            return current.reinitialized(timeout_ms, now)

        result = await self._change(transactional_id, step)
        assert result is not None
        if result.state.preparing:
            await self.complete(transactional_id)
            raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction was aborted; retry")
        return result

    async def _change_existing(self, transactional_id: str,
                               transition: Callable[[Transaction], Transaction | None]) -> Transaction:
        """A request for an id that must have a producer already (InitProducerId first)."""

        async def step(stored: StoredTransaction | None) -> Transaction | None:
            if stored is None:
                raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"no producer for {transactional_id!r}")
            return transition(stored.transaction)

        result = await self._change(transactional_id, step)
        assert result is not None  # the id exists: its state, changed or not
        return result

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> Transaction:
        now = self._clock_ms()

        def transition(current: Transaction) -> Transaction | None:
            if current.state == TxnState.ONGOING and set(partitions) <= current.partitions:
                current.with_partitions(producer_id, producer_epoch, (), now)  # the producer is still checked
                return None  # a retry: nothing to write
            return current.with_partitions(producer_id, producer_epoch, partitions, now)

        return await self._change_existing(transactional_id, transition)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> Transaction:
        now = self._clock_ms()
        return await self._change_existing(
            transactional_id, lambda current: current.with_group(producer_id, producer_epoch, group_id, now))

    async def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> Transaction:
        """EndTxn: stores PREPARE_* (the commit point) and answers; :meth:`complete` writes
        the markers (a retry of a finished EndTxn is answered as it was)."""
        now = self._clock_ms()
        return await self._change_existing(
            transactional_id, lambda current: current.ending(producer_id, producer_epoch, commit, now))

    async def complete(self, transactional_id: str) -> Transaction | None:
        """Write the markers of a prepared transaction, then store COMPLETE_*. Safe to repeat
        and to run on any gateway: the marker writer writes each partition's marker once."""
        stored = await self._store.get(transactional_id)
        if stored is None or not stored.transaction.state.preparing:
            return stored.transaction if stored else None
        await self._markers.write_markers(stored.transaction)
        now = self._clock_ms()

        async def step(current: StoredTransaction | None) -> Transaction | None:
            if current is None or not current.transaction.state.preparing:
                return None  # completed by another coordinator meanwhile
            return current.transaction.completed(now)

        return await self._change(transactional_id, step)

    async def abort_expired(self) -> list[str]:
        """Abort every ONGOING transaction past its timeout (also one that never wrote a
        batch), under a new epoch that fences its producer; returns their ids."""
        now = self._clock_ms()
        aborted = []
        for stored in await self._store.list():
            transaction = stored.transaction
            if not transaction.expired(now):
                continue

            async def step(current: StoredTransaction | None) -> Transaction | None:
                if current is None or not current.transaction.expired(now):
                    return None
                return current.transaction.aborted_for_fencing(now)

            changed = await self._change(transaction.transactional_id, step)
            if changed is not None and changed.state == TxnState.PREPARE_ABORT:
                log.info("transaction of %r timed out after %d ms: aborted", transaction.transactional_id,
                         transaction.timeout_ms)
                await self.complete(transaction.transactional_id)
                aborted.append(transaction.transactional_id)
        return aborted

    async def resume(self) -> list[str]:
        """Complete every transaction left prepared (by this or a dead coordinator)."""
        resumed = []
        for stored in await self._store.list():
            if stored.transaction.state.preparing:
                await self.complete(stored.transaction.transactional_id)
                resumed.append(stored.transaction.transactional_id)
        return resumed
