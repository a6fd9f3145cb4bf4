"""Share groups (KIP-932) on the wire, through the real handlers and kio's codecs: membership,
share sessions, acquisition and acknowledgement, the admin APIs, and what a client that errs
or attacks is answered."""

from __future__ import annotations

import time
import uuid

import trio

from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.direct import direct_gateway

ACCEPT, RELEASE, REJECT = 1, 2, 3


def _request(api_key: int, version: int, **values):
    return build(request_class(api_key, version), values)


async def _topic(gateway, name: str, partitions: int = 1, records: int = 0) -> uuid.UUID:
    created = await gateway.call(19, 7, _request(19, 7, topics=[dict(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none
    for partition in range(partitions):
        if records:
            batch = build_batch([(None, b"%d" % i) for i in range(records)], base_timestamp=int(time.time() * 1000))
            produced = await gateway.call(0, 9, _request(0, 9, transactional_id=None, acks=-1, timeout=5000, topic_data=[
                dict(name=name, partition_data=[dict(index=partition, records=batch)])]))
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    return created.topics[0].topic_id


async def _earliest(gateway, group: str, **more: str):
    configs = {"share.auto.offset.reset": "earliest", **more}
    altered = await gateway.call(44, 1, _request(44, 1, resources=[dict(
        resource_type=32, resource_name=group,
        configs=[dict(name=k, config_operation=0, value=v) for k, v in configs.items()])], validate_only=False))
    assert altered.responses[0].error_code == ErrorCode.none, altered.responses[0].error_message


def _beat(member: str, epoch: int, group: str = "g", topics=None):
    return _request(76, 1, group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                    subscribed_topic_names=topics)


def _fetch(member: str, epoch: int, topic_id: uuid.UUID | None = None, partitions=(0,), acks=None, group: str = "g",
           max_records: int = 500, max_wait: int = 0, version: int = 1):
    """A ShareFetch; ``acks``: {partition: [(first, last, [types])]}."""
    acks = acks or {}
    topics = []
    if topic_id is not None:
        topics = [dict(topic_id=topic_id, partitions=[dict(partition_index=p, acknowledgement_batches=[
            dict(first_offset=f, last_offset=la, acknowledge_types=t) for f, la, t in acks.get(p, [])])
            for p in sorted(set(partitions) | set(acks))])]
    return _request(78, version, group_id=group, member_id=member, share_session_epoch=epoch, max_wait=max_wait,
                    min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records, topics=topics,
                    forgotten_topics_data=[])


def _acknowledge(member: str, epoch: int, topic_id: uuid.UUID, acks, group: str = "g"):
    return _request(79, 1, group_id=group, member_id=member, share_session_epoch=epoch, topics=[dict(
        topic_id=topic_id, partitions=[dict(partition_index=p, acknowledgement_batches=[
            dict(first_offset=f, last_offset=la, acknowledge_types=t) for f, la, t in batches])
            for p, batches in acks.items()])])


def _acquired(answer) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in answer.responses for p in t.partitions for a in p.acquired_records]


def _partition(answer, index: int = 0):
    return next(p for t in answer.responses for p in t.partitions if p.partition_index == index)


async def test_members_join_share_a_partition_and_are_fenced_as_kafka_fences_them():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs")
        one = await gateway.call(76, 1, _beat("m1", 0, topics=["jobs"]))
        two = await gateway.call(76, 1, _beat("m2", 0, topics=["jobs"]))
        assert one.error_code == two.error_code == ErrorCode.none
        assert [(t.topic_id, list(t.partitions)) for t in two.assignment.topic_partitions] == [(topic_id, [0])]
        again = await gateway.call(76, 1, _beat("m1", one.member_epoch))  # the group moved on: m1 is told again
        assert again.member_epoch == two.member_epoch and list(again.assignment.topic_partitions[0].partitions) == [0]
        assert (await gateway.call(76, 1, _beat("m1", again.member_epoch + 5))).error_code == ErrorCode.fenced_member_epoch
        assert (await gateway.call(76, 1, _beat("nobody", 3))).error_code == ErrorCode.unknown_member_id
        assert (await gateway.call(76, 1, _beat("m3", 0))).error_code == ErrorCode.invalid_request  # no subscription
        described = (await gateway.call(77, 1, _request(77, 1, group_ids=["g", "unknown"],
                                                          include_authorized_operations=False))).groups
        assert described[0].group_state == "Stable" and described[0].assignor_name == "simple"
        assert sorted(m.member_id for m in described[0].members) == ["m1", "m2"]
        assert described[1].error_code == ErrorCode.group_id_not_found
        listed = await gateway.call(16, 5, _request(16, 5, states_filter=[], types_filter=["share"]))
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [("g", "share", "Stable")]
        left = await gateway.call(76, 1, _beat("m2", -1))
        assert left.error_code == ErrorCode.none and left.member_epoch == -1


async def test_records_are_acquired_once_acknowledged_released_and_given_back_when_a_session_closes():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=10)
        await _earliest(gateway, "g")
        first = await gateway.call(78, 1, _fetch("a", 0, topic_id, max_records=4))
        assert first.error_code == ErrorCode.none and first.acquisition_lock_timeout.total_seconds() == 30
        assert _acquired(first) == [(0, 3, 1)]
        second = await gateway.call(78, 1, _fetch("b", 0, topic_id))
        assert _acquired(second) == [(4, 9, 1)]
        # a acknowledges what it holds: 0 accepted, 1 released, 2 rejected, 3 still held.
        acked = await gateway.call(79, 1, _acknowledge("a", 1, topic_id, {0: [(0, 2, [ACCEPT, RELEASE, REJECT])]}))
        assert acked.error_code == ErrorCode.none and _partition(acked).error_code == ErrorCode.none
        # b cannot acknowledge a's records: all of the batch refused, nothing applied.
        refused = await gateway.call(79, 1, _acknowledge("b", 1, topic_id, {0: [(3, 4, [ACCEPT])]}))
        assert _partition(refused).error_code == ErrorCode.invalid_record_state
        again = await gateway.call(78, 1, _fetch("b", 2, topic_id))
        assert _acquired(again) == [(1, 1, 2)]  # the released record, its second delivery
        # a closes its session: 3 is given back; b's next fetch acknowledges 1 and gets 3.
        closed = await gateway.call(78, 1, _fetch("a", -1, None))
        assert closed.error_code == ErrorCode.none
        more = await gateway.call(78, 1, _fetch("b", 3, topic_id, acks={0: [(1, 1, [ACCEPT])]}))
        assert _partition(more).acknowledge_error_code == ErrorCode.none
        assert _acquired(more) == [(3, 3, 2)]
        described = await gateway.call(90, 1, _request(90, 1, groups=[dict(group_id="g", topics=None)]))
        (partition,) = described.groups[0].topics[0].partitions
        # 0, 1 and 2 are done (accepted, accepted, rejected): the start is 3, 7 records to go.
        assert (partition.start_offset, partition.lag) == (3, 7)


async def test_share_sessions_epochs_and_the_errors_of_a_client_that_errs():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=3)
        await _earliest(gateway, "g")
        assert (await gateway.call(78, 1, _fetch("a", 5, topic_id))).error_code == ErrorCode.share_session_not_found
        opened = await gateway.call(78, 1, _fetch("a", 0, topic_id))
        assert _acquired(opened) == [(0, 2, 1)]
        assert (await gateway.call(78, 1, _fetch("a", 7, topic_id))).error_code == ErrorCode.invalid_share_session_epoch
        acks_on_open = await gateway.call(78, 1, _fetch("a", 0, topic_id, acks={0: [(0, 0, [ACCEPT])]}))
        assert acks_on_open.error_code == ErrorCode.invalid_request
        assert (await gateway.call(79, 1, _acknowledge("a", 0, topic_id, {0: [(0, 0, [ACCEPT])]}))
                ).error_code == ErrorCode.invalid_share_session_epoch
        # An attacker's acknowledgements: an absurd range, unknown types, types that do not match.
        opened = await gateway.call(78, 1, _fetch("a", 0, topic_id))  # a new session: a's records given back
        assert _acquired(opened) == [(0, 2, 2)]
        attacks = [(0, 2**62, [ACCEPT]), (0, 0, [9]), (0, 2, [ACCEPT, ACCEPT]), (2, 0, [ACCEPT]), (-5, 0, [ACCEPT]),
                   (0, 0, [])]
        for epoch, batch in enumerate(attacks, start=1):
            answer = await gateway.call(79, 1, _acknowledge("a", epoch, topic_id, {0: [batch]}))
            assert _partition(answer).error_code in (ErrorCode.invalid_record_state, ErrorCode.invalid_request), batch
        held = await gateway.call(78, 1, _fetch("a", len(attacks) + 1, topic_id, acks={0: [(0, 2, [ACCEPT])]}))
        assert _partition(held).acknowledge_error_code == ErrorCode.none  # nothing an attack did was applied
        unknown = await gateway.call(79, 1, _acknowledge("a", len(attacks) + 2, uuid.uuid4(), {0: [(0, 0, [ACCEPT])]}))
        assert _partition(unknown).error_code == ErrorCode.unknown_topic_id
        nameless = await gateway.call(78, 1, _fetch("", 0, topic_id))
        assert nameless.error_code == ErrorCode.unknown_member_id


async def test_a_long_poll_wakes_for_a_record_produced():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs")
        await _earliest(gateway, "g")
        assert _acquired(await gateway.call(78, 1, _fetch("a", 0, topic_id))) == []
        answers = []

        async def poll():
            answers.append(await gateway.call(78, 1, _fetch("a", 1, topic_id, max_wait=10_000)))

        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(poll)
            await trio.sleep(0.2)
            batch = build_batch([(None, b"late")], base_timestamp=int(time.time() * 1000))
            await gateway.call(0, 9, _request(0, 9, transactional_id=None, acks=-1, timeout=5000, topic_data=[
                dict(name="jobs", partition_data=[dict(index=0, records=batch)])]))
        assert _acquired(answers[0]) == [(0, 0, 1)] and trio.current_time() - started < 5


async def test_the_admin_apis_describe_reset_and_delete_a_groups_start_offsets():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", partitions=2, records=5)
        await _earliest(gateway, "g")
        await gateway.call(76, 1, _beat("m", 0, topics=["jobs"]))
        fetched = await gateway.call(78, 1, _fetch("m", 0, topic_id, partitions=(0, 1)))
        assert sorted(_acquired(fetched)) == [(0, 4, 1), (0, 4, 1)]
        await gateway.call(79, 1, _acknowledge("m", 1, topic_id, {0: [(0, 4, [ACCEPT])]}))
        described = await gateway.call(90, 1, _request(90, 1, groups=[dict(group_id="g", topics=None)]))
        offsets = {p.partition_index: (p.start_offset, p.lag) for p in described.groups[0].topics[0].partitions}
        assert offsets == {0: (5, 0), 1: (0, 5)}
        alter = _request(91, 0, group_id="g", topics=[dict(topic_name="jobs", partitions=[
            dict(partition_index=1, start_offset=3)])])
        assert (await gateway.call(91, 0, alter)).error_code == ErrorCode.non_empty_group
        await gateway.call(76, 1, _beat("m", -1))
        altered = await gateway.call(91, 0, alter)
        assert altered.error_code == ErrorCode.none and altered.responses[0].partitions[0].error_code == ErrorCode.none
        described = await gateway.call(90, 1, _request(90, 1, groups=[dict(group_id="g", topics=[
            dict(topic_name="jobs", partitions=[1])])]))
        assert described.groups[0].topics[0].partitions[0].start_offset == 3
        deleted = await gateway.call(92, 0, _request(92, 0, group_id="g", topics=[dict(topic_name="jobs")]))
        assert deleted.error_code == ErrorCode.none and deleted.responses[0].error_code == ErrorCode.none
        described = await gateway.call(90, 1, _request(90, 1, groups=[dict(group_id="g", topics=None)]))
        assert described.groups[0].topics == ()
        removed = await gateway.call(42, 2, _request(42, 2, groups_names=["g"]))
        assert removed.results[0].error_code == ErrorCode.none
        listed = await gateway.call(16, 5, _request(16, 5, states_filter=[], types_filter=[]))
        assert listed.groups == ()


async def test_a_group_id_names_one_kind_of_group():
    async with direct_gateway() as gateway:
        await _topic(gateway, "jobs")
        assert (await gateway.call(76, 1, _beat("m", 0, topics=["jobs"]))).error_code == ErrorCode.none
        join = await gateway.call(11, 9, _request(11, 9, group_id="g", session_timeout=10_000, rebalance_timeout=10_000,
                                                  member_id="", group_instance_id=None, protocol_type="consumer",
                                                  protocols=[dict(name="range", metadata=b"")], reason=None))
        assert join.error_code == ErrorCode.inconsistent_group_protocol
        consumer = await gateway.call(68, 1, _request(
            68, 1, group_id="g", member_id="c", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout=30_000,
            subscribed_topic_names=["jobs"], subscribed_topic_regex=None, server_assignor=None, topic_partitions=None))
        assert consumer.error_code == ErrorCode.group_id_not_found
        await gateway.call(68, 1, _request(
            68, 1, group_id="c", member_id="c", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout=30_000,
            subscribed_topic_names=["jobs"], subscribed_topic_regex=None, server_assignor=None, topic_partitions=None))
        assert (await gateway.call(76, 1, _beat("m", 0, group="c", topics=["jobs"]))).error_code == ErrorCode.group_id_not_found
        (described,) = (await gateway.call(15, 6, _request(15, 6, groups=["g"], include_authorized_operations=False))).groups
        assert described.error_code == ErrorCode.group_id_not_found  # as Kafka: ShareGroupDescribe describes it


async def test_deleting_a_topic_removes_its_share_state():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=3)
        await _earliest(gateway, "g")
        await gateway.call(78, 1, _fetch("a", 0, topic_id))
        store = gateway.gateway.store
        assert [i.key for i in await store.list("kafscale/~meta/shares/")]
        deleted = await gateway.call(20, 6, _request(20, 6, topics=[dict(name="jobs", topic_id=None)], timeout=5000))
        assert deleted.responses[0].error_code == ErrorCode.none
        assert [i.key for i in await store.list("kafscale/~meta/shares/")] == []


async def test_a_member_gone_without_a_word_loses_its_session_and_its_records():
    """No heartbeat reaches a partition's owner that is not the group's coordinator: a share
    session unused for the session timeout is closed, its records given back."""
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=3)
        await _earliest(gateway, "g", **{"share.record.lock.duration.ms": "3600000"})
        assert _acquired(await gateway.call(78, 1, _fetch("gone", 0, topic_id))) == [(0, 2, 1)]
        shares = gateway.gateway.shares
        await shares.tick(trio.current_time() + 10)
        assert ("g", "gone") in shares.sessions
        await shares.tick(trio.current_time() + 46)  # past share.session.timeout.ms, long before the lock ends
        assert ("g", "gone") not in shares.sessions
        assert _acquired(await gateway.call(78, 1, _fetch("next", 0, topic_id))) == [(0, 2, 2)]


async def test_find_coordinator_names_a_share_partitions_owner():
    import base64

    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs")
        kafka_form = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
        keys = [f"g:{kafka_form}:0", f"g:{topic_id}:0", "g:not-an-id:0", f"g:{uuid.uuid4()}:0", "nonsense"]
        found = await gateway.call(10, 6, _request(10, 6, key_type=2, coordinator_keys=keys))
        codes = [(c.key, c.error_code, c.node_id) for c in found.coordinators]
        assert codes == [(keys[0], ErrorCode.none, 0), (keys[1], ErrorCode.none, 0),
                         (keys[2], ErrorCode.invalid_request, -1), (keys[3], ErrorCode.unknown_topic_or_partition, -1),
                         (keys[4], ErrorCode.invalid_request, -1)]


async def test_records_deleted_while_in_flight_are_archived_and_the_start_follows_the_log():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=10)
        await _earliest(gateway, "g")
        assert _acquired(await gateway.call(78, 1, _fetch("a", 0, topic_id, max_records=6))) == [(0, 5, 1)]
        deleted = await gateway.call(21, 2, _request(21, 2, topics=[dict(name="jobs", partitions=[
            dict(partition_index=0, offset=4)])], timeout=5000))
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
        # 0..3 are gone from the log: no longer in flight, so no longer acknowledged; 4 and 5 still are.
        gone = await gateway.call(78, 1, _fetch("a", 1, topic_id, acks={0: [(0, 3, [ACCEPT])]}))
        assert _partition(gone).acknowledge_error_code == ErrorCode.invalid_record_state
        kept = await gateway.call(79, 1, _acknowledge("a", 2, topic_id, {0: [(4, 5, [ACCEPT])]}))
        assert _partition(kept).error_code == ErrorCode.none
        described = await gateway.call(90, 1, _request(90, 1, groups=[dict(group_id="g", topics=None)]))
        assert described.groups[0].topics[0].partitions[0].start_offset == 6


async def test_a_long_poll_wakes_for_a_record_given_back():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=1)
        await _earliest(gateway, "g")
        assert _acquired(await gateway.call(78, 1, _fetch("a", 0, topic_id))) == [(0, 0, 1)]
        assert _acquired(await gateway.call(78, 1, _fetch("b", 0, topic_id))) == []
        answers = []

        async def poll():
            answers.append(await gateway.call(78, 1, _fetch("b", 1, topic_id, max_wait=10_000)))

        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            nursery.start_soon(poll)
            await trio.sleep(0.2)
            await gateway.call(79, 1, _acknowledge("a", 1, topic_id, {0: [(0, 0, [RELEASE])]}))
        assert _acquired(answers[0]) == [(0, 0, 2)] and trio.current_time() - started < 5


async def test_an_unreadable_share_state_is_refused_not_started_empty():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", records=3)
        await _earliest(gateway, "g")
        key = f"kafscale/~meta/shares/{b'g'.hex()}/{topic_id.hex}/0.json"
        await gateway.gateway.store.put(key, b'{"start_offset": "not a number"')
        answer = await gateway.call(78, 1, _fetch("a", 0, topic_id))
        assert _partition(answer).error_code == ErrorCode.unknown_server_error
        assert "unreadable" in _partition(answer).error_message
        assert await gateway.gateway.store.get(key) == b'{"start_offset": "not a number"'  # left for repair


async def test_a_fetch_limited_in_records_takes_the_partitions_in_turn():
    async with direct_gateway() as gateway:
        topic_id = await _topic(gateway, "jobs", partitions=2, records=10)
        await _earliest(gateway, "g")
        first = await gateway.call(78, 1, _fetch("a", 0, topic_id, partitions=(0, 1), max_records=5))
        second = await gateway.call(78, 1, _fetch("a", 1, topic_id, partitions=(0, 1), max_records=5))
        taken = [[p.partition_index for t in answer.responses for p in t.partitions if p.acquired_records]
                 for answer in (first, second)]
        assert sorted(taken) == [[0], [1]]  # one partition's backlog does not keep the other waiting
