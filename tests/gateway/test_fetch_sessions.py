"""Incremental fetch sessions (KIP-227) through the real Fetch handler: a session's first
Fetch is answered in full and opens it; later ones list only what moved, and are answered
only with what changed; Kafka's errors for a wrong epoch, an unknown or another principal's
session; a full cache serves fetches without sessions."""

from devkit.wire_client import produce
from kafscale.gateway.fetch_sessions import FetchSessions
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.direct import direct_gateway

VERSION = 12  # topics by name; v13+ by id, as the Java client sends them


def _fetch(session_id: int, epoch: int, partitions: dict[int, int], forgotten=(), max_wait=0):
    return build(request_class(1, VERSION), dict(
        replica_id=-1, max_wait=max_wait, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[dict(topic="s", partitions=[dict(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                                 last_fetched_epoch=-1, log_start_offset=-1,
                                                 partition_max_bytes=1 << 20) for p, o in partitions.items()])]
        if partitions else [],
        forgotten_topics_data=[dict(topic="s", partitions=list(forgotten))] if forgotten else [], rack_id=""))


def _listed(answer) -> dict[int, int]:
    """partition → high watermark of what the answer lists."""
    return {p.partition_index: p.high_watermark for t in answer.responses for p in t.partitions}


async def _topic(gateway, partitions=3):
    created = await gateway.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name="s", num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False)))
    assert created.topics[0].error_code == ErrorCode.none


async def test_a_session_answers_only_what_changed():
    async with direct_gateway() as gateway:
        await _topic(gateway)
        first = await gateway.call(1, VERSION, _fetch(0, 0, {0: 0, 1: 0, 2: 0}))
        assert first.error_code == ErrorCode.none and first.session_id != 0
        assert _listed(first) == {0: 0, 1: 0, 2: 0}  # in full, opening the session
        session = first.session_id
        quiet = await gateway.call(1, VERSION, _fetch(session, 1, {}))
        assert (quiet.session_id, _listed(quiet)) == (session, {})  # nothing moved, nothing listed
        await gateway.call(0, 9, produce("s", build_batch([(b"k", b"v")]), partition=1))
        moved = await gateway.call(1, VERSION, _fetch(session, 2, {}))
        assert _listed(moved) == {1: 1}  # only the partition with a record
        assert moved.responses[0].partitions[0].records is not None
        advanced = await gateway.call(1, VERSION, _fetch(session, 3, {1: 1}))  # the client moved on
        assert _listed(advanced) == {}
        forgot = await gateway.call(1, VERSION, _fetch(session, 4, {}, forgotten=[1]))
        await gateway.call(0, 9, produce("s", build_batch([(b"k", b"w")]), partition=1))
        assert _listed(forgot) == {}
        assert _listed(await gateway.call(1, VERSION, _fetch(session, 5, {}))) == {}  # forgotten: not fetched
        closed = await gateway.call(1, VERSION, _fetch(session, -1, {0: 0, 1: 0}))
        assert closed.session_id == 0 and _listed(closed) == {0: 0, 1: 2}  # full, sessionless
        gone = await gateway.call(1, VERSION, _fetch(session, 6, {}))
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


async def test_wrong_epochs_and_other_principals_sessions_are_refused():
    async with direct_gateway() as gateway:
        await _topic(gateway, 1)
        session = (await gateway.call(1, VERSION, _fetch(0, 0, {0: 0}))).session_id
        stale = await gateway.call(1, VERSION, _fetch(session, 7, {}))
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch and stale.responses == ()
        stolen = await gateway.call(1, VERSION, _fetch(session, 1, {}), principal="User:mallory")
        assert stolen.error_code == ErrorCode.fetch_session_id_not_found
        assert (await gateway.call(1, VERSION, _fetch(session, 1, {}))).error_code == ErrorCode.none
        nowhere = await gateway.call(1, VERSION, _fetch(0, 3, {0: 0}))
        assert nowhere.error_code == ErrorCode.invalid_fetch_session_epoch


async def test_a_full_cache_fetches_without_a_session():
    async with direct_gateway(fetch_session_cache_slots=1) as gateway:
        await _topic(gateway, 1)
        kept = await gateway.call(1, VERSION, _fetch(0, 0, {0: 0}))
        assert kept.session_id != 0
        refused = await gateway.call(1, VERSION, _fetch(0, 0, {0: 0}))  # the one slot is in use
        assert (refused.error_code, refused.session_id, _listed(refused)) == (ErrorCode.none, 0, {0: 0})


def test_an_idle_session_makes_room_in_a_full_cache():
    sessions = FetchSessions(slots=1, seed=7)
    first = sessions.open("User:a", now=0.0)
    assert first is not None and sessions.open("User:b", now=60.0) is None
    second = sessions.open("User:b", now=121.0)  # the first has been idle past Kafka's 120 s
    assert second is not None and len(sessions) == 1
