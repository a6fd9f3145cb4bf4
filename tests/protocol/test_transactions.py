"""The transaction coordinator's state machine, markers and the aborted-transaction index."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.records import build_batch, split_batches
from kafscale.protocol.transactions import (
    MAX_EPOCH,
    AbortedBatches,
    AbortedTxn,
    PartitionTransactions,
    PendingOffset,
    Transaction,
    TxnState,
    last_stable_offset,
    marker_batch,
    read_marker,
)


def _fresh() -> Transaction:
    return Transaction("app-1", producer_id=7, producer_epoch=0, timeout_ms=60_000)


def _code(call) -> ErrorCode:
    with pytest.raises(KafkaError) as refused:
        call()
    return refused.value.code


def test_a_commit_goes_through_prepare_to_complete_and_a_retry_is_answered_none():
    txn = _fresh().with_partitions(7, 0, [("t", 0)], now_ms=10)
    assert txn.state == TxnState.ONGOING and txn.started_ms == 10
    txn = txn.with_partitions(7, 0, [("t", 1)], now_ms=20)
    assert txn.partitions == {("t", 0), ("t", 1)} and txn.started_ms == 10
    prepared = txn.ending(7, 0, commit=True, now_ms=30)
    assert prepared.state == TxnState.PREPARE_COMMIT
    assert _code(lambda: prepared.ending(7, 0, commit=True, now_ms=31)) == ErrorCode.concurrent_transactions
    assert _code(lambda: prepared.ending(7, 0, commit=False, now_ms=31)) == ErrorCode.invalid_txn_state
    assert _code(lambda: prepared.with_partitions(7, 0, [("t", 2)], 31)) == ErrorCode.concurrent_transactions
    done = prepared.completed(now_ms=40)
    assert done.state == TxnState.COMPLETE_COMMIT and not done.partitions
    assert done.ending(7, 0, commit=True, now_ms=41) is None  # a retried EndTxn
    assert _code(lambda: done.ending(7, 0, commit=False, now_ms=41)) == ErrorCode.invalid_txn_state
    again = done.with_partitions(7, 0, [("u", 0)], now_ms=50)  # the next transaction
    assert again.state == TxnState.ONGOING and again.partitions == {("u", 0)} and again.started_ms == 50


def test_a_new_epoch_fences_the_old_producer():
    txn = _fresh().with_partitions(7, 0, [("t", 0)], now_ms=10)
    assert _code(lambda: txn.reinitialized(60_000, 20)) == ErrorCode.concurrent_transactions
    aborting = txn.aborted_for_fencing(now_ms=20)
    assert aborting.state == TxnState.PREPARE_ABORT and aborting.producer_epoch == 1
    assert _code(lambda: aborting.ending(7, 0, commit=True, now_ms=21)) == ErrorCode.producer_fenced
    fresh = aborting.completed(30).reinitialized(60_000, 31)
    assert (fresh.state, fresh.producer_epoch) == (TxnState.EMPTY, 2)
    assert _code(lambda: fresh.with_partitions(7, 1, [("t", 0)], 32)) == ErrorCode.producer_fenced
    assert _code(lambda: fresh.with_partitions(8, 2, [("t", 0)], 32)) == ErrorCode.invalid_producer_id_mapping
    assert _code(lambda: fresh.ending(7, 2, commit=True, now_ms=33)) == ErrorCode.invalid_txn_state


def test_the_last_epoch_starts_a_new_producer_id():
    worn = Transaction("app-1", 7, MAX_EPOCH - 1, 60_000)
    with pytest.raises(ValueError):
        worn.reinitialized(60_000, 1)
    renewed = worn.reinitialized(60_000, 1, new_producer_id=99)
    assert (renewed.producer_id, renewed.producer_epoch) == (99, 0)


def test_an_ongoing_transaction_expires_after_its_timeout():
    txn = _fresh().with_partitions(7, 0, [("t", 0)], now_ms=1_000)
    assert not txn.expired(61_000) and txn.expired(61_001)
    assert not txn.ending(7, 0, False, 2_000).expired(10**9)


def test_offsets_join_the_transaction_with_their_group():
    txn = _fresh().with_group(7, 0, "g", now_ms=5)
    assert txn.state == TxnState.ONGOING and txn.group_ids == {"g"}
    assert txn.with_group(7, 0, "h", 6).group_ids == {"g", "h"}


def test_transactions_v2_bump_the_epoch_at_every_end_and_answer_a_retry_with_the_producer_given():
    txn = _fresh().with_partitions(7, 0, [("t", 0)], now_ms=10)
    prepared = txn.ending_v2(7, 0, commit=True, now_ms=20)
    # The markers carry the next epoch: a late batch of epoch 0 is fenced in every partition.
    assert (prepared.state, prepared.producer_epoch, prepared.producer_after) == (TxnState.PREPARE_COMMIT, 1, (7, 1))
    assert _code(lambda: prepared.ending_v2(7, 0, commit=True, now_ms=21)) == ErrorCode.concurrent_transactions
    done = prepared.completed(now_ms=30)
    assert (done.state, done.producer_id, done.producer_epoch, done.next_producer) == (
        TxnState.COMPLETE_COMMIT, 7, 1, None)
    assert done.ending_v2(7, 0, commit=True, now_ms=31) is None  # the retry: answered with (7, 1)
    assert _code(lambda: done.ending_v2(7, 0, commit=False, now_ms=31)) == ErrorCode.producer_fenced
    assert _code(lambda: done.with_partitions(7, 0, [("t", 0)], 32)) == ErrorCode.producer_fenced
    following = done.with_partitions(7, 1, [("t", 0)], 32)  # the next transaction, under epoch 1
    assert following.state == TxnState.ONGOING
    assert following.ending_v2(7, 1, commit=False, now_ms=33).producer_after == (7, 2)


def test_transactions_v2_abort_with_nothing_begun_bumps_the_epoch_and_commit_is_refused():
    fresh = _fresh()
    aborted = fresh.ending_v2(7, 0, commit=False, now_ms=5)
    assert (aborted.state, aborted.partitions, aborted.all_done) == (TxnState.PREPARE_ABORT, frozenset(), True)
    assert aborted.completed(6).producer_after == (7, 1)
    assert _code(lambda: fresh.ending_v2(7, 0, commit=True, now_ms=5)) == ErrorCode.invalid_txn_state


def test_transactions_v2_at_the_last_epochs_hand_the_producer_a_new_id():
    worn = Transaction("app-1", 7, MAX_EPOCH - 1, 60_000).with_partitions(7, MAX_EPOCH - 1, [("t", 0)], 1)
    with pytest.raises(ValueError):
        worn.ending_v2(7, MAX_EPOCH - 1, True, 2)
    prepared = worn.ending_v2(7, MAX_EPOCH - 1, True, 2, new_producer_id=99)
    assert (prepared.producer_id, prepared.producer_epoch) == (7, MAX_EPOCH)  # the markers' producer
    done = prepared.completed(3)
    assert (done.producer_id, done.producer_epoch) == (99, 0)
    assert done.ending_v2(7, MAX_EPOCH - 1, True, 4) is None  # a retry with the old id is still recognised


def test_transactions_v2_offsets_add_their_group_themselves():
    offset = PendingOffset("g", "t", 0, 42)
    assert _code(lambda: _fresh().with_offsets(7, 0, [offset], 5)) == ErrorCode.invalid_txn_state
    txn = _fresh().with_offsets(7, 0, [offset], 5, implicit=True)
    assert (txn.state, txn.group_ids, txn.offsets) == (TxnState.ONGOING, {"g"}, (offset,))
    assert _code(lambda: _fresh().with_offsets(7, 3, [offset], 5, implicit=True)) == ErrorCode.producer_fenced


@given(st.sampled_from(list(TxnState)), st.frozensets(st.tuples(st.text(max_size=5), st.integers(0, 100))),
       st.frozensets(st.text(max_size=5)),
       st.none() | st.tuples(st.integers(0, 2**62), st.integers(0, MAX_EPOCH)),
       st.none() | st.tuples(st.integers(0, 2**62), st.integers(0, MAX_EPOCH)))
def test_a_stored_transaction_reads_back_as_written(state, partitions, groups, ended_by, next_producer):
    txn = Transaction("id", 3, 4, 500, state, partitions, groups, 10, 20, ended_by=ended_by,
                      next_producer=next_producer)
    assert Transaction.from_json("id", txn.to_json()) == txn


@given(st.booleans(), st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, MAX_EPOCH))
def test_a_marker_reads_back_as_written(commit, coordinator_epoch, producer_id, epoch):
    batch = marker_batch(producer_id, epoch, commit, coordinator_epoch, 1_700_000_000_000)
    [header] = split_batches(batch)
    assert header.is_control and header.is_transactional and header.producer_id == producer_id
    marker = read_marker(batch, header)
    assert (marker.commit, marker.coordinator_epoch) == (commit, coordinator_epoch)


@given(st.dictionaries(st.integers(0, 2**40), st.integers(0, 2**40), max_size=5),
       st.lists(st.builds(lambda first, span, pid: AbortedTxn(first, first + span, pid, first),
                          st.integers(0, 2**40), st.integers(0, 1000), st.integers(0, 2**40)), max_size=20),
       st.integers(0, 2**41))
def test_a_partition_state_reads_back(open_, aborted, end):
    state = PartitionTransactions(open_, aborted, end)
    back = PartitionTransactions.decode(state.encode(0, 2**42))
    assert (back.open, sorted(back.aborted), back.end) == (open_, sorted(aborted), end)


def test_a_stored_partition_state_holds_only_what_is_durable():
    state = PartitionTransactions({1: 10, 2: 30}, [], 35)
    back = PartitionTransactions.decode(state.encode(0, 25))
    assert (back.open, back.end) == ({1: 10}, 25)


def test_a_partition_state_forgets_aborted_spans_below_the_log_start():
    state = PartitionTransactions({}, [AbortedTxn(1, 5, 3, 1), AbortedTxn(8, 20, 4, 8)], 21)
    assert PartitionTransactions.decode(state.encode(6, 21)).aborted == [AbortedTxn(8, 20, 4, 8)]


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"version": 2}', b'{"version": 1, "end": 1}', b"[1]"])
def test_a_damaged_partition_state_is_refused(raw):
    with pytest.raises(ValueError):
        PartitionTransactions.decode(raw)


def test_offsets_join_a_transaction_only_for_an_added_group():
    ongoing = _fresh().with_partitions(7, 0, [("t", 0)], 1)
    offset = PendingOffset("g", "in", 0, 42)
    assert _code(lambda: ongoing.with_offsets(7, 0, [offset], 2)) == ErrorCode.invalid_txn_state
    with_group = ongoing.with_group(7, 0, "g", 2)
    first = with_group.with_offsets(7, 0, [offset], 3)
    again = first.with_offsets(7, 0, [PendingOffset("g", "in", 0, 50)], 4)
    assert again.offsets == (PendingOffset("g", "in", 0, 50),)
    assert Transaction.from_json("app-1", again.to_json()) == again


def test_a_prepared_transaction_completes_once_every_partition_and_group_is_done():
    prepared = _fresh().with_partitions(7, 0, [("t", 0), ("t", 1)], 1).with_group(7, 0, "g", 2).ending(7, 0, True, 3)
    partly = prepared.with_done([("t", 0)], [], 4)
    assert partly.state == TxnState.PREPARE_COMMIT and partly.partitions_done == {("t", 0)}
    assert Transaction.from_json("app-1", partly.to_json()) == partly
    done = partly.with_done([("t", 1), ("other", 9)], ["g"], 5)
    assert done.state == TxnState.COMPLETE_COMMIT and not done.partitions and not done.partitions_done


def test_the_last_stable_offset_stops_at_the_oldest_open_transaction():
    assert last_stable_offset(100, []) == 100
    assert last_stable_offset(100, [40, 70]) == 40


def _stored(data: bytes, offset: int):
    """A batch as stored: stamped at ``offset``; (its header, its bytes)."""
    stamped = bytearray(data)
    struct.pack_into(">q", stamped, 0, offset)
    return split_batches(bytes(stamped))[0], bytes(stamped)


def _transactional(offset: int, producer_id: int, count: int = 1):
    return _stored(build_batch([(b"k", b"v")] * count, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                               transactional=True), offset)


def _marker(offset: int, producer_id: int, commit: bool):
    return _stored(marker_batch(producer_id, 0, commit, 0, 1), offset)


def test_a_partition_tracks_open_transactions_the_lso_and_the_aborted_ones():
    txns = PartitionTransactions()
    txns.appended(*_stored(build_batch([(b"a", b"1")]), 0))  # not transactional
    assert txns.last_stable_offset(1) == 1
    for header, data in (_transactional(1, 5, 2), _transactional(3, 6), _transactional(4, 5)):
        txns.appended(header, data)
    assert txns.open == {5: 1, 6: 3} and txns.last_stable_offset(5) == 1
    txns.appended(*_marker(5, 5, commit=False))
    assert txns.last_stable_offset(6) == 3
    assert txns.aborted == [AbortedTxn(1, 5, 5, 3)]
    txns.appended(*_marker(6, 6, commit=True))
    assert txns.last_stable_offset(7) == 7 and len(txns.aborted) == 1
    assert txns.aborted_between(0, 1) == [] and txns.aborted_between(5, 7) == [AbortedTxn(1, 5, 5, 3)]
    assert txns.aborted_between(6, 7) == []


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 200), st.integers(0, 20)), max_size=12),
       st.integers(0, 3), st.integers(0, 230), st.booleans())
def test_a_batch_is_aborted_when_its_producer_has_an_aborted_span_holding_it(spans, pid, offset, transactional):
    entries = [AbortedTxn(first, first + length, producer, first) for producer, first, length in spans]
    header = split_batches(build_batch([(b"k", b"v")], base_offset=offset, producer_id=pid, producer_epoch=0,
                                       base_sequence=0, transactional=transactional))[0]
    expected = transactional and any(e.producer_id == pid and e.first_offset <= offset <= e.last_offset
                                     for e in entries)
    assert (header in AbortedBatches(entries)) == expected
