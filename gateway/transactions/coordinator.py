"""The transaction coordinator: requests become guarded writes of a transaction's state.

Each request reads the transactional id's stored state, computes the next one with the
pure transitions of :mod:`kafscale.protocol.transactions`, and writes it with a
compare-and-swap on the version read; a lost swap (another coordinator wrote first)
reads again and decides anew, so the stored state only ever moves along Kafka's
state machine. EndTxn answers once PREPARE_COMMIT or PREPARE_ABORT is stored (the
commit point, as in Kafka); the markers are then written to every partition of the
transaction by the owners of its partitions (:class:`MarkerWriter`: each gateway
finishes what it owns, and records it in the transaction's state), the groups'
coordinators apply its offsets, and COMPLETE_* is stored with the last of them.
:meth:`TransactionCoordinator.run`, on every gateway, finishes prepared transactions at
once, and sweeps: what a dead or remote coordinator left prepared, transactions past
their timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.transactions import PendingOffset, Transaction, TxnState, TxnVersion

from ..maintenance import MaintenanceFailures
from ..ownership import Mode
from .store import ABSENT, StoredTransaction, TransactionChanged, TransactionStore

__all__ = ["MarkerWriter", "TransactionCoordinator", "TransactionStats", "MAX_TIMEOUT_MS"]

log = logging.getLogger("kafscale.transactions")

MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
_ATTEMPTS = 5
_FINISH_WAIT_S = 5.0


class MarkerWriter(Protocol):
    async def finish(self, transaction: Transaction) -> tuple[set[tuple[str, int]], set[str]]:
        """For the prepared ``transaction``: append its COMMIT or ABORT marker, durably and once,
        to each of its partitions this gateway owns, and apply (commit) or drop (abort) its
        offsets of each group this gateway coordinates; the partitions and groups done."""
        ...

    def coordinates(self, transactional_id: str) -> bool:
        """Whether this gateway coordinates ``transactional_id`` (it aborts it on timeout)."""
        ...

    async def abort_orphans(self, live_producers: set[int], older_than_s: float) -> int:
        """Abort transactions open in this gateway's partitions longer than ``older_than_s``
        whose producer has no unfinished transaction; the markers written."""
        ...


@dataclass(slots=True)
class TransactionStats:
    store_writes: int = 0  # guarded writes of transaction states that landed
    committed: int = 0  # transactions this gateway completed, by outcome
    aborted: int = 0
    timed_out: int = 0  # aborted by this gateway at their timeout
    ids_expired: int = 0  # transactional ids deleted after transactional_id_expiration_ms unused


class _NeedsProducerId(Exception):
    """An EndTxn of transactions v2 at the last epochs: it is decided again with a new producer id."""


class TransactionCoordinator:
    def __init__(self, store: TransactionStore, new_producer_id: Callable[[], Awaitable[int]],
                 markers: MarkerWriter, clock_ms: Callable[[], int], max_timeout_ms: int = MAX_TIMEOUT_MS, *,
                 failures: MaintenanceFailures, mode: Mode,
                 id_expiration_ms: int = ID_EXPIRATION_MS) -> None:
        """``mode`` CLUSTER: other gateways coordinate transactions in the same store, so every
        decision reads the store; alone, this coordinator is the only writer of its store:
        it keeps each id's state as it last wrote or read it and reads the store only for
        an id it does not know or after losing a swap (a write it did not expect), and a
        sweep reads nothing while idle."""
        self._store = store
        self._failures = failures
        self._new_producer_id = new_producer_id
        self._markers = markers
        self._clock_ms = clock_ms
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self._shared = mode is Mode.CLUSTER
        self._known: dict[str, StoredTransaction] = {}  # alone: each id's state and version, as last seen
        # One change of an id at a time here: what _known holds is always the latest change's.
        self._changing: dict[str, trio.Lock] = {}
        self.stats = TransactionStats()
        self._prepared: set[str] = set()  # to finish now (prepared here, or seen prepared elsewhere)
        self._woken = trio.Event()

    def now_ms(self) -> int:
        return self._clock_ms()

    async def load(self) -> None:
        """At start, alone: every id's state (those an earlier run left unfinished among them)."""
        if not self._shared:
            self._known = {s.transaction.transactional_id: s for s in await self._store.list()}

    async def _read(self, transactional_id: str) -> StoredTransaction | None:
        if not self._shared:
            known = self._known.get(transactional_id)
            if known is not None:
                return known
        stored = await self._store.get(transactional_id)
        self._seen(transactional_id, stored)
        return stored

    def _seen(self, transactional_id: str, stored: StoredTransaction | None) -> None:
        if self._shared:
            return
        if stored is None:
            self._known.pop(transactional_id, None)
        else:
            self._known[transactional_id] = stored

    async def _change(self, transactional_id: str,
                      step: Callable[[StoredTransaction | None], Awaitable[Transaction | None]]) -> Transaction | None:
        """Read, decide, swap; again from the new state if another coordinator wrote first."""
        async with self._changing.setdefault(transactional_id, trio.Lock()):
            return await self._change_once(transactional_id, step)

    async def _change_once(self, transactional_id: str,
                           step: Callable[[StoredTransaction | None], Awaitable[Transaction | None]]
                           ) -> Transaction | None:
        for _ in range(_ATTEMPTS):
            stored = await self._read(transactional_id)
            wanted = await step(stored)
            if wanted is None:
                return stored.transaction if stored else None
            try:
                version = await self._store.put(wanted, stored.version if stored else ABSENT)
            except TransactionChanged:
                self._known.pop(transactional_id, None)  # read it again
                continue
            self.stats.store_writes += 1
            if not wanted.state.preparing and stored is not None and stored.transaction.state.preparing:
                if wanted.state == TxnState.COMPLETE_COMMIT:
                    self.stats.committed += 1
                else:
                    self.stats.aborted += 1
            self._seen(transactional_id, StoredTransaction(wanted, version) if version else None)
            return wanted
        raise KafkaError(ErrorCode.concurrent_transactions, f"{transactional_id!r} keeps changing; retry")

    async def init_producer_id(self, transactional_id: str, timeout_ms: int) -> Transaction:
        """InitProducerId with a transactional id: the id's producer under a new epoch,
        which fences every older producer of it. An ongoing transaction is aborted and
        finished first (CONCURRENT_TRANSACTIONS only while another gateway has yet to write
        its markers: the client retries)."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise KafkaError(ErrorCode.invalid_transaction_timeout,
                             f"transaction.timeout.ms {timeout_ms} is not in (0, {self.max_timeout_ms}]")
        now = self._clock_ms()

        async def step(stored: StoredTransaction | None) -> Transaction | None:
            if stored is None:
                return Transaction(transactional_id, await self._new_producer_id(), 0, timeout_ms, updated_ms=now)
            current = stored.transaction
            if current.state.preparing:
                return None  # still being finished: finished below, then decided again
            if current.state == TxnState.ONGOING:
                return current.aborted_for_fencing(now)
            if current.epoch_exhausted:
                return current.reinitialized(timeout_ms, now, await self._new_producer_id())
            return current.reinitialized(timeout_ms, now)

        result = await self._change(transactional_id, step)
        assert result is not None
        if result.state.preparing:  # the previous transaction (aborted just now, or before): finished first
            await self.complete(transactional_id)
            result = await self._change(transactional_id, step)
            assert result is not None
            if result.state.preparing:  # a partition's owner elsewhere has yet to write its marker
                raise KafkaError(ErrorCode.concurrent_transactions, "the previous transaction is being finished; retry")
        return result

    async def _change_existing(self, transactional_id: str,
                               transition: Callable[[Transaction], Transaction | None]) -> Transaction:
        """A request for an id that must have a producer already (InitProducerId first). One
        that finds the previous transaction still being finished finishes it (this gateway's
        part) and tries once more, instead of sending the client away to retry."""

        async def step(stored: StoredTransaction | None) -> Transaction | None:
            if stored is None:
                raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"no producer for {transactional_id!r}")
            return transition(stored.transaction)

        try:
            result = await self._change(transactional_id, step)
        except KafkaError as exc:
            if exc.code != ErrorCode.concurrent_transactions:
                raise
            await self.complete(transactional_id)
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

    async def end(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                  version: TxnVersion) -> Transaction:
        """EndTxn: stores PREPARE_* (the commit point), then finishes this gateway's part
        before answering, for at most ``_FINISH_WAIT_S`` (so a read_committed consumer sees
        a commit as soon as its producer is told; alone, nothing is left to the client's
        next transaction); what is left is finished by :meth:`run`. A retry of a finished
        EndTxn is answered as it was (in v2: with the producer it was given,
        :attr:`Transaction.producer_after`)."""
        now = self._clock_ms()
        if version is TxnVersion.V1:
            ended = await self._change_existing(
                transactional_id, lambda current: current.ending(producer_id, producer_epoch, commit, now))
        else:
            new_producer_id: int | None = None  # taken only once the epochs run out

            def transition(current: Transaction) -> Transaction | None:
                if current.epoch_exhausted and new_producer_id is None:
                    raise _NeedsProducerId
                return current.ending_v2(producer_id, producer_epoch, commit, now, new_producer_id)

            try:
                ended = await self._change_existing(transactional_id, transition)
            except _NeedsProducerId:
                new_producer_id = await self._new_producer_id()
                ended = await self._change_existing(transactional_id, transition)
        if ended.state.preparing:
            finished = None
            with trio.move_on_after(_FINISH_WAIT_S):
                try:
                    finished = await self.complete(transactional_id)
                except Exception as exc:  # decided all the same: run() tries again
                    log.info("transaction %r decided, markers pending: %s", transactional_id, exc)
            if finished is None or finished.state.preparing:
                self.finish_soon(transactional_id)
        return ended

    def finish_soon(self, transactional_id: str) -> None:
        """Have :meth:`run` finish this gateway's part of a prepared transaction now."""
        self._prepared.add(transactional_id)
        self._woken.set()

    async def run(self, check_interval_s: float, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Finish prepared transactions as soon as they are prepared (here, or elsewhere: the
        store's watch), each in its own task; sweep every ``check_interval_s``."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._store.watch_prepared, self.finish_soon)
            task_status.started()
            next_sweep = trio.current_time()
            while True:
                with trio.move_on_at(next_sweep):
                    await self._woken.wait()
                self._woken = trio.Event()
                while self._prepared:
                    nursery.start_soon(self._finish, self._prepared.pop())
                if trio.current_time() >= next_sweep:
                    next_sweep = trio.current_time() + check_interval_s
                    with self._failures.guard("transaction sweep", "a pass"):
                        await self.sweep()

    async def _finish(self, transactional_id: str) -> None:
        try:
            await self.complete(transactional_id)
        except Exception as exc:  # the next sweep tries again
            log.info("transaction %r decided, markers pending: %s", transactional_id, exc)

    async def complete(self, transactional_id: str) -> Transaction | None:
        """Finish what this gateway can of a prepared transaction (its partitions' markers, its
        groups' offsets) and record it; the last gateway to do so stores COMPLETE_*. Safe to
        repeat and to run on any gateway: a marker is written once per partition."""
        stored = await self._read(transactional_id)
        if stored is None or not stored.transaction.state.preparing:
            return stored.transaction if stored else None
        transaction = stored.transaction
        partitions, groups = await self._markers.finish(transaction)
        if not (partitions - transaction.partitions_done or groups - transaction.groups_done) \
                and not transaction.all_done:  # (all done at once: an abort of nothing begun)
            return transaction
        now = self._clock_ms()

        async def step(current: StoredTransaction | None) -> Transaction | None:
            if current is None or not current.transaction.state.preparing \
                    or current.transaction.producer_epoch != transaction.producer_epoch:
                return None  # completed by another gateway meanwhile
            return current.transaction.with_done(partitions, groups, now)

        return await self._change(transactional_id, step)

    async def sweep(self) -> None:
        """Every gateway, now and then: finish its part of every prepared transaction (one a
        dead or remote coordinator left), and abort the transactions it coordinates that are
        past their timeout."""
        now = self._clock_ms()
        known = await self._all_known()
        unfinished = [t for t in known if t.state == TxnState.ONGOING or t.state.preparing]
        for transaction in unfinished:
            with self._failures.guard("transaction sweep", repr(transaction.transactional_id)):
                try:
                    if transaction.state.preparing:
                        await self.complete(transaction.transactional_id)
                    elif transaction.expired(now) and self._markers.coordinates(transaction.transactional_id):
                        await self._abort_expired(transaction.transactional_id, now)
                except KafkaError as exc:  # e.g. a partition moving; the next sweep tries again
                    log.info("transaction %r not finished yet: %s", transaction.transactional_id, exc)
        # A transaction still open in a partition twice the longest timeout after it was seen
        # there, with no unfinished transaction of its producer: its end was lost.
        await self._markers.abort_orphans({t.producer_id for t in unfinished}, 2 * self.max_timeout_ms / 1000)
        for transaction in known:
            if self._id_expired(transaction, now) and self._markers.coordinates(transaction.transactional_id):
                with self._failures.guard("transaction sweep", repr(transaction.transactional_id)):
                    await self._expire_id(transaction.transactional_id, now)

    def _id_expired(self, transaction: Transaction, now: int) -> bool:
        """Kafka's transactional.id.expiration.ms: an id with no transaction in flight, not
        used for that long (a state never stamped with its update time is kept)."""
        return (transaction.state in _IDLE and transaction.updated_ms >= 0
                and now - transaction.updated_ms >= self.id_expiration_ms)

    async def _expire_id(self, transactional_id: str, now: int) -> None:
        async with self._changing.setdefault(transactional_id, trio.Lock()):
            stored = await self._read(transactional_id)
            if stored is None or not self._id_expired(stored.transaction, now):
                return
            try:
                await self._store.delete(transactional_id, stored.version)
            except TransactionChanged:
                return  # used again meanwhile
            finally:
                self._known.pop(transactional_id, None)
            self.stats.ids_expired += 1
            log.info("transactional id %r expired: unused for %d ms", transactional_id, now - stored.transaction.updated_ms)

    async def _abort_expired(self, transactional_id: str, now: int) -> None:
        """Abort an ONGOING transaction past its timeout (also one that never wrote a batch),
        under a new epoch that fences its producer."""

        async def step(current: StoredTransaction | None) -> Transaction | None:
            if current is None or not current.transaction.expired(now):
                return None
            return current.transaction.aborted_for_fencing(now)

        changed = await self._change(transactional_id, step)
        if changed is not None and changed.state == TxnState.PREPARE_ABORT:
            self.stats.timed_out += 1
            log.info("transaction of %r timed out after %d ms: aborted", transactional_id, changed.timeout_ms)
            await self.complete(transactional_id)

    async def state(self, transactional_id: str) -> Transaction | None:
        stored = await self._read(transactional_id)
        return stored.transaction if stored else None

    async def all(self) -> list[Transaction]:
        return [stored.transaction for stored in await self._store.list()]

    async def _all_known(self) -> list[Transaction]:
        """Every id's transaction (alone: known without reading the store)."""
        return await self.all() if self._shared else [s.transaction for s in self._known.values()]

    async def unfinished(self) -> list[Transaction]:
        """The transactions ongoing or prepared."""
        return [t for t in await self._all_known() if t.state == TxnState.ONGOING or t.state.preparing]

    async def pending_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions whose offsets in ``group_id`` wait for a transaction to finish."""
        return {(o.topic, o.partition) for t in await self.unfinished() for o in t.offsets if o.group_id == group_id}

    async def commit_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             offsets: list[PendingOffset], version: TxnVersion) -> Transaction:
        """TxnOffsetCommit: the offsets wait in the transaction's state until it commits (in
        v2 the request adds their group to the transaction itself)."""
        now = self._clock_ms()
        implicit = version is TxnVersion.V2
        return await self._change_existing(
            transactional_id,
            lambda current: current.with_offsets(producer_id, producer_epoch, offsets, now, implicit=implicit))

    async def abort(self, transactional_id: str) -> Transaction | None:
        """An operator's abort of an ongoing transaction (as on timeout)."""
        now = self._clock_ms()

        async def step(current: StoredTransaction | None) -> Transaction | None:
            if current is None or current.transaction.state != TxnState.ONGOING:
                return None
            return current.transaction.aborted_for_fencing(now)

        await self._change(transactional_id, step)
        return await self.complete(transactional_id)
