"""The transaction coordinator over the embedded store, with marker writers that record
what they were asked and own some partitions (as gateways of a cluster do)."""

from dataclasses import replace

import pytest

from kafscale.gateway.maintenance import MaintenanceFailures
from kafscale.gateway.ownership import Mode
from kafscale.gateway.storage import AsyncStore
from kafscale.gateway.transactions.coordinator import TransactionCoordinator
from kafscale.gateway.transactions.store import EmbeddedTransactionStore
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.transactions import MAX_EPOCH, PendingOffset, TxnState, TxnVersion
from kafscale.storage_backends import MemoryBackend


class RecordedMarkers:
    """A gateway's marker writer: it owns the partitions ``owns`` accepts, and every group."""

    def __init__(self, owns=lambda partition: True) -> None:
        self.written: list[tuple[str, bool, frozenset]] = []
        self.fail = False
        self.owns = owns

    async def finish(self, transaction):
        if self.fail:
            raise KafkaError(ErrorCode.not_leader_or_follower, "a partition moved")
        mine = frozenset(p for p in transaction.partitions - transaction.partitions_done if self.owns(p))
        if mine:
            self.written.append((transaction.transactional_id, transaction.state == TxnState.PREPARE_COMMIT, mine))
        return set(mine), set(transaction.group_ids)

    def coordinates(self, transactional_id: str) -> bool:
        return True

    async def abort_orphans(self, live_producers, older_than_s) -> int:
        return 0


@pytest.fixture
def parts():
    clock = [1_000]
    ids = iter(range(100, 200))
    markers = RecordedMarkers()
    store = EmbeddedTransactionStore(AsyncStore(MemoryBackend(), 2), "kafscale")

    async def new_id():
        return next(ids)

    coordinator = TransactionCoordinator(store, new_id, markers, lambda: clock[0], failures=MaintenanceFailures(), mode=Mode.CLUSTER)
    return coordinator, markers, clock, store


async def _code(awaitable) -> ErrorCode:
    with pytest.raises(KafkaError) as refused:
        await awaitable
    return refused.value.code


async def test_a_transaction_commits_through_prepare_markers_and_complete(parts):
    coordinator, markers, clock, store = parts
    producer = await coordinator.init_producer_id("tx", 60_000)
    assert (producer.producer_id, producer.producer_epoch) == (100, 0)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0), ("t", 1)])
    await coordinator.add_partitions("tx", 100, 0, [("t", 0)])  # a retry
    await coordinator.add_offsets("tx", 100, 0, "g")
    prepared = await coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V1)
    assert prepared.state == TxnState.PREPARE_COMMIT  # the commit point: what the answer stands on
    # ... and this gateway, owning every partition, wrote the markers before answering.
    assert markers.written == [("tx", True, frozenset({("t", 0), ("t", 1)}))]
    assert (await store.get("tx")).transaction.state == TxnState.COMPLETE_COMMIT
    assert (await coordinator.complete("tx")).state == TxnState.COMPLETE_COMMIT  # again: nothing more
    assert len(markers.written) == 1
    retried = await coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V1)
    assert retried.state == TxnState.COMPLETE_COMMIT


async def test_transactions_v2_end_under_the_next_epoch_and_an_empty_abort_completes(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0)])  # as a Produce v12 adds it
    await coordinator.commit_offsets("tx", 100, 0, [PendingOffset("g", "t", 0, 5)], TxnVersion.V2)
    prepared = await coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V2)
    assert (prepared.producer_epoch, prepared.producer_after, prepared.group_ids) == (1, (100, 1), {"g"})
    stored = (await store.get("tx")).transaction
    assert (stored.state, stored.producer_id, stored.producer_epoch) == (TxnState.COMPLETE_COMMIT, 100, 1)
    retried = await coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V2)
    assert retried.producer_after == (100, 1)
    # An abort with nothing begun: no marker to write, completed at once under epoch 2.
    aborted = await coordinator.end("tx", 100, 1, commit=False, version=TxnVersion.V2)
    assert aborted.producer_after == (100, 2) and len(markers.written) == 1
    assert (await store.get("tx")).transaction.state == TxnState.COMPLETE_ABORT


async def test_transactions_v2_give_a_new_producer_id_when_the_epochs_run_out(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("tx", 60_000)
    worn = replace((await store.get("tx")).transaction, producer_epoch=MAX_EPOCH - 1)
    await store.put(worn, (await store.get("tx")).version)
    await coordinator.add_partitions("tx", 100, MAX_EPOCH - 1, [("t", 0)])
    ended = await coordinator.end("tx", 100, MAX_EPOCH - 1, commit=True, version=TxnVersion.V2)
    assert ended.producer_after == (101, 0) and ended.producer_epoch == MAX_EPOCH
    assert (await coordinator.add_partitions("tx", 101, 0, [("t", 0)])).state == TxnState.ONGOING


async def test_a_new_producer_of_the_id_fences_the_old_one_and_aborts_its_transaction(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0)])
    again = await coordinator.init_producer_id("tx", 60_000)  # aborts the ongoing one first
    assert markers.written == [("tx", False, frozenset({("t", 0)}))]
    assert (again.producer_id, again.producer_epoch) == (100, 2)
    assert await _code(coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V1)) == ErrorCode.producer_fenced
    assert await _code(coordinator.add_partitions("tx", 100, 1, [("t", 0)])) == ErrorCode.producer_fenced


async def test_a_prepared_transaction_is_finished_by_the_next_coordinator(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0)])
    markers.fail = True
    await coordinator.end("tx", 100, 0, commit=False, version=TxnVersion.V1)
    with pytest.raises(KafkaError):
        await coordinator.complete("tx")  # the marker could not be written: it stays prepared
    assert (await store.get("tx")).transaction.state == TxnState.PREPARE_ABORT
    markers.fail = False
    async def no_new_id():
        raise AssertionError("finishing a transaction takes no producer id")

    successor = TransactionCoordinator(store, no_new_id, markers, lambda: clock[0],
                                       failures=MaintenanceFailures(), mode=Mode.CLUSTER)  # another gateway
    await successor.sweep()
    assert (await store.get("tx")).transaction.state == TxnState.COMPLETE_ABORT
    assert markers.written == [("tx", False, frozenset({("t", 0)}))]


async def test_a_transaction_past_its_timeout_is_aborted_even_without_a_batch(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("tx", 10_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 3)])
    clock[0] += 10_000
    await coordinator.sweep()
    assert (await store.get("tx")).transaction.state == TxnState.ONGOING
    clock[0] += 1
    await coordinator.sweep()
    assert (await store.get("tx")).transaction.state == TxnState.COMPLETE_ABORT
    assert await _code(coordinator.end("tx", 100, 0, commit=True, version=TxnVersion.V1)) == ErrorCode.producer_fenced


async def test_a_timeout_above_the_maximum_is_refused(parts):
    coordinator, *_ = parts
    assert await _code(coordinator.init_producer_id("tx", 900_001)) == ErrorCode.invalid_transaction_timeout
    assert await _code(coordinator.add_partitions("nobody", 1, 0, [("t", 0)])) == \
        ErrorCode.invalid_producer_id_mapping


async def test_each_gateway_writes_the_markers_of_its_partitions_and_the_last_completes(parts):
    coordinator, _, clock, store = parts
    first = RecordedMarkers(owns=lambda partition: partition[1] == 0)
    second = RecordedMarkers(owns=lambda partition: partition[1] == 1)

    async def no_new_id():
        raise AssertionError("finishing a transaction takes no producer id")

    here = TransactionCoordinator(store, no_new_id, first, lambda: clock[0], failures=MaintenanceFailures(), mode=Mode.CLUSTER)
    there = TransactionCoordinator(store, no_new_id, second, lambda: clock[0], failures=MaintenanceFailures(), mode=Mode.CLUSTER)
    elsewhere = TransactionCoordinator(store, no_new_id, RecordedMarkers(owns=lambda partition: False),
                                       lambda: clock[0], failures=MaintenanceFailures(), mode=Mode.CLUSTER)  # a coordinator owning none of them
    await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0), ("t", 1)])
    assert (await elsewhere.end("tx", 100, 0, commit=True, version=TxnVersion.V1)).state == TxnState.PREPARE_COMMIT
    partly = await here.complete("tx")
    assert partly.state == TxnState.PREPARE_COMMIT and partly.partitions_done == {("t", 0)}
    await here.sweep()  # nothing more it can do, and nothing written twice
    assert first.written == [("tx", True, frozenset({("t", 0)}))]
    await there.sweep()
    assert (await store.get("tx")).transaction.state == TxnState.COMPLETE_COMMIT
    assert second.written == [("tx", True, frozenset({("t", 1)}))]


async def test_the_next_transaction_finishes_the_previous_one_instead_of_being_sent_away(parts):
    coordinator, markers, clock, store = parts

    async def no_new_id():
        raise AssertionError("no producer id needed")

    elsewhere = TransactionCoordinator(store, no_new_id, RecordedMarkers(owns=lambda partition: False),
                                       lambda: clock[0], failures=MaintenanceFailures(), mode=Mode.CLUSTER)
    await coordinator.init_producer_id("tx", 60_000)
    await coordinator.add_partitions("tx", 100, 0, [("t", 0)])
    await elsewhere.end("tx", 100, 0, commit=False, version=TxnVersion.V1)  # decided, its marker not written yet
    assert (await store.get("tx")).transaction.state == TxnState.PREPARE_ABORT
    nxt = await coordinator.add_partitions("tx", 100, 0, [("t", 1)])  # not CONCURRENT_TRANSACTIONS
    assert nxt.state == TxnState.ONGOING and nxt.partitions == {("t", 1)}
    assert markers.written == [("tx", False, frozenset({("t", 0)}))]


async def test_an_id_unused_for_its_expiration_is_deleted_and_one_in_flight_kept(parts):
    coordinator, markers, clock, store = parts
    await coordinator.init_producer_id("done", 60_000)
    await coordinator.add_partitions("done", 100, 0, [("t", 0)])
    await coordinator.end("done", 100, 0, commit=True, version=TxnVersion.V1)
    await coordinator.init_producer_id("idle", 60_000)
    busy = await coordinator.init_producer_id("busy", 60_000)
    clock[0] += coordinator.id_expiration_ms - 1
    await coordinator.sweep()
    assert {s.transaction.transactional_id for s in await store.list()} == {"done", "idle", "busy"}
    await coordinator.add_partitions("busy", busy.producer_id, 0, [("t", 1)])  # in flight now
    clock[0] += 1
    await coordinator.sweep()
    assert {s.transaction.transactional_id for s in await store.list()} == {"busy"}
    assert coordinator.stats.ids_expired == 2
    # A new producer of an expired id starts over, under a new producer id.
    again = await coordinator.init_producer_id("idle", 60_000)
    assert again.producer_epoch == 0 and again.producer_id not in (100, 101, 102)
