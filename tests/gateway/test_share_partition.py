"""The share-partition's pure transitions (KIP-932): acquisition, acknowledgement, locks,
delivery limits, the start offset, and what is stored."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.gateway.shares.partition import (
    Acknowledgement,
    AckType,
    Acquired,
    Limits,
    LogBatch,
    RecordState,
    SharePartition,
    StateBatch,
)
from kafscale.protocol.errors import ErrorCode, KafkaError

LIMITS = Limits(lock_s=30, delivery_limit=3, max_in_flight=100)


def _batches(first: int, last: int, size: int = 5) -> list[LogBatch]:
    return [LogBatch(o, min(o + size - 1, last), False) for o in range(first, last + 1, size)]


def test_records_go_to_one_member_at_a_time_and_the_start_moves_over_accepted_ones():
    share = SharePartition(0)
    assert share.acquire("a", _batches(0, 9), 0, 4, now=0, limits=LIMITS) == [Acquired(0, 3, 1)]
    assert share.next_wanted() == 4
    assert share.acquire("b", _batches(0, 9), 0, 10, now=0, limits=LIMITS) == [Acquired(4, 9, 1)]
    share.acknowledge("b", [Acknowledgement(4, 9, (AckType.ACCEPT,))], now=1, limits=LIMITS)
    assert share.start == 0  # 0..3 are still a's
    share.acknowledge("a", [Acknowledgement(0, 3, (AckType.ACCEPT,))], now=1, limits=LIMITS)
    assert (share.start, share.end, share.in_flight, share.states()) == (10, 10, 0, [])


def test_a_member_acknowledges_only_what_it_holds_and_all_or_nothing():
    share = SharePartition(0)
    share.acquire("a", _batches(0, 4), 0, 5, now=0, limits=LIMITS)
    with pytest.raises(KafkaError) as raised:
        share.acknowledge("b", [Acknowledgement(0, 0, (AckType.ACCEPT,))], now=0, limits=LIMITS)
    assert raised.value.code == ErrorCode.invalid_record_state
    with pytest.raises(KafkaError) as raised:  # 5 was never acquired: nothing of 3..5 is applied
        share.acknowledge("a", [Acknowledgement(3, 5, (AckType.ACCEPT,))], now=0, limits=LIMITS)
    assert raised.value.code == ErrorCode.invalid_record_state
    with pytest.raises(KafkaError):  # several batches: one bad, none applied
        share.acknowledge("a", [Acknowledgement(0, 1, (AckType.ACCEPT,)), Acknowledgement(4, 5, (AckType.ACCEPT,))],
                          now=0, limits=LIMITS)
    assert share.acquired_by("a") == [0, 1, 2, 3, 4]
    with pytest.raises(KafkaError) as raised:  # types must be one, or one per offset
        share.acknowledge("a", [Acknowledgement(0, 2, (1, 1))], now=0, limits=LIMITS)
    assert raised.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError):
        share.acknowledge("a", [Acknowledgement(0, 0, (9,))], now=0, limits=LIMITS)
    with pytest.raises(KafkaError) as raised:  # an absurd range is refused at once, not walked
        share.acknowledge("a", [Acknowledgement(0, 2**62, (AckType.ACCEPT,))], now=0, limits=LIMITS)
    assert raised.value.code == ErrorCode.invalid_record_state


def test_released_records_come_back_rejected_ones_never_and_the_limit_archives_a_poison_record():
    share = SharePartition(0)
    share.acquire("a", _batches(0, 2), 0, 3, now=0, limits=LIMITS)
    share.acknowledge("a", [Acknowledgement(0, 2, (AckType.RELEASE, AckType.REJECT, AckType.ACCEPT))], now=0, limits=LIMITS)
    assert share.start == 0 and share.next_wanted() == 0
    assert share.acquire("b", _batches(0, 2), 0, 10, now=0, limits=LIMITS) == [Acquired(0, 0, 2)]
    share.acknowledge("b", [Acknowledgement(0, 0, (AckType.RELEASE,))], now=0, limits=LIMITS)
    assert share.acquire("c", _batches(0, 2), 0, 10, now=0, limits=LIMITS) == [Acquired(0, 0, 3)]
    share.acknowledge("c", [Acknowledgement(0, 0, (AckType.RELEASE,))], now=0, limits=LIMITS)  # the third delivery: archived
    assert share.start == 3 and share.acquire("d", _batches(0, 2), 0, 10, now=0, limits=LIMITS) == []


def test_locks_expire_and_renew():
    share = SharePartition(0)
    share.acquire("a", _batches(0, 1), 0, 2, now=0, limits=LIMITS)
    share.acknowledge("a", [Acknowledgement(1, 1, (AckType.RENEW,))], now=20, limits=LIMITS)
    assert share.next_expiry() == 30
    assert share.expire(30, LIMITS) == 1  # offset 0's lock ended; 1's runs to 50
    assert share.acquired_by("a") == [1]
    assert share.acquire("b", _batches(0, 1), 0, 5, now=31, limits=LIMITS) == [Acquired(0, 0, 2)]
    assert share.release_member("a", LIMITS) == 1 and share.acquired_by("a") == []


def test_markers_gaps_and_the_in_flight_ceiling():
    share = SharePartition(0)
    # 0..4 data, 5 a marker, 6..7 removed by the cleaner, 8..9 data
    batches = [LogBatch(0, 4, False), LogBatch(5, 5, True), LogBatch(8, 9, False)]
    assert share.acquire("a", batches, 0, 100, now=0, limits=LIMITS) == [Acquired(0, 4, 1), Acquired(8, 9, 1)]
    share.acknowledge("a", [Acknowledgement(0, 4, (AckType.ACCEPT,))], now=0, limits=LIMITS)
    assert share.start == 8  # over the marker and the gap
    ceiling = Limits(30, 3, max_in_flight=3)
    share = SharePartition(0)
    assert share.acquire("a", _batches(0, 9), 0, 100, now=0, limits=ceiling) == [Acquired(0, 2, 1)]
    assert share.acquire("a", _batches(3, 9), 3, 100, now=0, limits=ceiling) == []


def test_retention_moves_the_start_and_an_administrator_resets_it():
    share = SharePartition(0)
    share.acquire("a", _batches(0, 9), 0, 10, now=0, limits=LIMITS)
    share.trim(5)
    assert share.start == 5 and share.acquired_by("a") == [5, 6, 7, 8, 9]
    share.reset(100)
    assert (share.start, share.end, share.state_epoch, share.acquired_by("a")) == (100, 100, 1, [])


def test_the_stored_state_keeps_acknowledgements_and_delivery_counts_and_drops_locks():
    share = SharePartition(0)
    share.acquire("a", _batches(0, 5), 0, 6, now=0, limits=LIMITS)
    share.acknowledge("a", [Acknowledgement(1, 2, (AckType.ACCEPT,))], now=0, limits=LIMITS)
    share.acknowledge("a", [Acknowledgement(3, 3, (AckType.REJECT,))], now=0, limits=LIMITS)
    share.acknowledge("a", [Acknowledgement(4, 4, (AckType.RELEASE,))], now=0, limits=LIMITS)
    stored = share.states()
    assert stored == [StateBatch(0, 0, RecordState.AVAILABLE, 1), StateBatch(1, 2, RecordState.ACKNOWLEDGED, 1),
                      StateBatch(3, 3, RecordState.ARCHIVED, 1), StateBatch(4, 5, RecordState.AVAILABLE, 1)]
    restored = SharePartition(share.start, stored)
    # After a restart: 0, 4 and 5 are delivered again (a second time), 1..3 never.
    assert restored.acquire("b", _batches(0, 9), 0, 100, now=0, limits=LIMITS) == [
        Acquired(0, 0, 2), Acquired(4, 5, 2), Acquired(6, 9, 1)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["fetch", "accept", "release", "reject", "expire",
                                                                     "leave", "restart"]),
                          st.integers(1, 6)), max_size=60))
def test_no_record_is_held_twice_lost_or_delivered_after_acceptance(steps):
    """Any run of fetches, acknowledgements, expiries and restarts (the stored state
    reloaded): a record is never held by two members, never delivered again once accepted
    or rejected, never skipped unless accepted, rejected or out of deliveries."""
    log_end = 40
    share = SharePartition(0)
    finished: set[int] = set()  # accepted or rejected
    delivered: dict[int, int] = {}  # offset → deliveries seen
    now = 0.0
    for member, action, n in steps:
        now += 1
        if action == "fetch":
            read_from = share.next_wanted()
            got = share.acquire(member, _batches(read_from, log_end - 1) if read_from < log_end else [], read_from, n,
                                now, LIMITS)
            for run in got:
                for offset in range(run.first, run.last + 1):
                    assert offset not in finished
                    assert run.deliveries > delivered.get(offset, 0) - 1  # counts never go back (a restart
                    delivered[offset] = run.deliveries                     # may forget an acquisition only)
        elif action in ("accept", "release", "reject"):
            held = share.acquired_by(member)[:n]
            kind = {"accept": AckType.ACCEPT, "release": AckType.RELEASE, "reject": AckType.REJECT}[action]
            for offset in held:
                share.acknowledge(member, [Acknowledgement(offset, offset, (kind,))], now, LIMITS)
                if kind is not AckType.RELEASE:
                    finished.add(offset)
        elif action == "expire":
            now += LIMITS.lock_s
            share.expire(now, LIMITS)
        elif action == "leave":
            share.release_member(member, LIMITS)
        else:
            share = SharePartition(share.start, share.states())
        holders: dict[int, str] = {}
        for m in "abc":
            for offset in share.acquired_by(m):
                assert offset not in holders
                holders[offset] = m
        # Nothing is skipped: below the start, each record was accepted, rejected or delivered
        # as often as the limit allows.
        for offset in range(share.start):
            assert offset in finished or delivered.get(offset, 0) >= LIMITS.delivery_limit, offset
        assert share.start <= share.end
        assert {b.state for b in share.states()} <= {RecordState.AVAILABLE, RecordState.ACKNOWLEDGED,
                                                      RecordState.ARCHIVED}
