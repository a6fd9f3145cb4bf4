"""The group coordinator's state machine, driven directly (trio, memory store). Each test
takes pytest-trio's autojump_clock, so rebalance and session timers run in virtual time."""

import pytest
import trio

from kafscale.gateway.groups import EmbeddedGroupStore, GroupCoordinator, GroupState
from kafscale.gateway.groups.configs import EmbeddedGroupConfigs
from kafscale.gateway.groups.coordinator import GroupSettings
from kafscale.gateway.groups.offsets_topic import NoOffsetsTopic
from kafscale.gateway.groups.store import CommittedOffset
from kafscale.gateway.ownership import Mode
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol import ErrorCode, KafkaError
from kafscale.storage_backends import MemoryBackend

SETTINGS = GroupSettings(min_session_timeout_ms=1000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0)


def _coordinator(backend) -> GroupCoordinator:
    store = AsyncStore(backend, 2)
    return GroupCoordinator(EmbeddedGroupStore(store, "ns"), SETTINGS, offsets_log=NoOffsetsTopic(),
                            configs=EmbeddedGroupConfigs(store, "ns"), mode=Mode.EMBEDDED, slots=1)


@pytest.fixture
def backend():
    return MemoryBackend()


@pytest.fixture
async def coordinator(nursery, backend):
    groups = _coordinator(backend)
    await nursery.start(groups.run)
    return groups


def _join_args(member_id="", protocols=(("range", b"meta"),), instance=None, session=10_000, rebalance=10_000):
    return dict(group_id="g", member_id=member_id, group_instance_id=instance, client_id="c", client_host="h",
                session_timeout_ms=session, rebalance_timeout_ms=rebalance, protocol_type="consumer",
                protocols=list(protocols), require_known_member_id=True, supports_skip_assignment=False,
                topics=dict)


async def _join_with_handshake(coordinator, **kwargs):
    first = await coordinator.join(**_join_args(**kwargs))
    assert first["error_code"] == ErrorCode.member_id_required
    return await coordinator.join(**_join_args(member_id=first["member_id"], **kwargs))


async def test_member_id_handshake_join_and_sync(autojump_clock, coordinator):
    result = await _join_with_handshake(coordinator)
    assert result["error_code"] == ErrorCode.none and result["generation_id"] == 1
    assert result["leader"] == result["member_id"] and len(result["members"]) == 1
    member = result["member_id"]
    synced = await coordinator.sync(group_id="g", member_id=member, generation=1, group_instance_id=None,
                                    protocol_type="consumer", protocol_name="range", assignments={member: b"mine"})
    assert synced["assignment"] == b"mine"
    assert coordinator.groups["g"].state == GroupState.STABLE


async def test_two_members_get_the_leaders_assignment(autojump_clock, coordinator, nursery):
    results = {}

    async def member(name):
        results[name] = await _join_with_handshake(coordinator)

    nursery.start_soon(member, "a")
    nursery.start_soon(member, "b")
    await trio.sleep(0.1)
    # The first generation completed with whoever joined; one more rebalance brings both
    # in when the second arrived during the first.
    while coordinator.groups["g"].state != GroupState.COMPLETING_REBALANCE or len(results) < 2:
        await trio.sleep(0.1)
        if coordinator.groups["g"].state == GroupState.COMPLETING_REBALANCE and len(results) == 2:
            break
    group = coordinator.groups["g"]
    ids = [r["member_id"] for r in results.values()]
    leader = group.leader_id
    assert sorted(ids) == sorted(group.members)
    assert all(r["generation_id"] == group.generation for r in results.values())
    follower = next(i for i in ids if i != leader)
    got = {}

    async def sync(member_id, assignments):
        got[member_id] = await coordinator.sync(group_id="g", member_id=member_id, generation=group.generation,
                                                group_instance_id=None, protocol_type=None, protocol_name=None,
                                                assignments=assignments)

    nursery.start_soon(sync, follower, {})
    await trio.sleep(0.1)
    assert follower not in got  # followers wait for the leader
    await sync(leader, {leader: b"L", follower: b"F"})
    await trio.sleep(0.1)
    assert got[follower]["assignment"] == b"F" and got[leader]["assignment"] == b"L"


async def test_session_expiry_removes_a_silent_member(autojump_clock, coordinator):
    result = await _join_with_handshake(coordinator, session=2000)
    member = result["member_id"]
    await coordinator.sync(group_id="g", member_id=member, generation=1, group_instance_id=None,
                           protocol_type=None, protocol_name=None, assignments={member: b"x"})
    await trio.sleep(1.5)
    coordinator.heartbeat(group_id="g", member_id=member, generation=1, group_instance_id=None)
    await trio.sleep(3)
    assert coordinator.groups["g"].state == GroupState.EMPTY
    with pytest.raises(KafkaError) as info:
        coordinator.heartbeat(group_id="g", member_id=member, generation=1, group_instance_id=None)
    assert info.value.code == ErrorCode.unknown_member_id


async def test_heartbeat_during_rebalance_says_rejoin(autojump_clock, coordinator, nursery):
    first = await _join_with_handshake(coordinator)
    a = first["member_id"]
    await coordinator.sync(group_id="g", member_id=a, generation=1, group_instance_id=None,
                           protocol_type=None, protocol_name=None, assignments={a: b"x"})
    nursery.start_soon(lambda: _join_with_handshake(coordinator))
    await trio.sleep(0.1)
    with pytest.raises(KafkaError) as info:
        coordinator.heartbeat(group_id="g", member_id=a, generation=1, group_instance_id=None)
    assert info.value.code == ErrorCode.rebalance_in_progress
    rejoined = await coordinator.join(**_join_args(member_id=a))
    assert rejoined["generation_id"] == 2 and len(coordinator.groups["g"].members) == 2


async def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(autojump_clock, coordinator, nursery):
    first = await _join_with_handshake(coordinator, rebalance=3000, session=30_000)
    a = first["member_id"]
    await coordinator.sync(group_id="g", member_id=a, generation=1, group_instance_id=None,
                           protocol_type=None, protocol_name=None, assignments={a: b"x"})
    result = {}

    async def newcomer():
        result["b"] = await _join_with_handshake(coordinator, rebalance=3000, session=30_000)

    nursery.start_soon(newcomer)
    await trio.sleep(4)  # a never rejoins
    assert result["b"]["generation_id"] == 2
    assert list(coordinator.groups["g"].members) == [result["b"]["member_id"]]


async def test_inconsistent_protocols_and_bad_session_timeouts(autojump_clock, coordinator):
    await _join_with_handshake(coordinator)
    with pytest.raises(KafkaError) as info:
        await coordinator.join(**_join_args(protocols=(("other", b""),)))
    assert info.value.code == ErrorCode.inconsistent_group_protocol
    with pytest.raises(KafkaError) as info:
        await coordinator.join(**_join_args(session=10))
    assert info.value.code == ErrorCode.invalid_session_timeout


async def test_commit_rules_and_durable_offsets(autojump_clock, coordinator, backend, nursery):
    # Standalone commit (generation -1, no member) on an empty group is allowed.
    group = coordinator.check_commit("solo", "", -1, None)
    await coordinator.commit(group, {("t", 0): CommittedOffset(42, -1, "meta", 1)})
    assert coordinator.committed("solo")[("t", 0)].offset == 42
    assert coordinator.committed("never") == {}

    result = await _join_with_handshake(coordinator)
    member = result["member_id"]
    with pytest.raises(KafkaError) as info:
        coordinator.check_commit("g", "", -1, None)  # the group has members
    assert info.value.code == ErrorCode.unknown_member_id
    await coordinator.sync(group_id="g", member_id=member, generation=1, group_instance_id=None,
                           protocol_type=None, protocol_name=None, assignments={})
    with pytest.raises(KafkaError) as info:
        coordinator.check_commit("g", member, 7, None)
    assert info.value.code == ErrorCode.illegal_generation
    group = coordinator.check_commit("g", member, 1, None)
    await coordinator.commit(group, {("t", 1): CommittedOffset(9)})

    reloaded = _coordinator(backend)
    await reloaded.load()
    assert reloaded.committed("solo")[("t", 0)] == CommittedOffset(42, -1, "meta", 1)
    assert reloaded.committed("g")[("t", 1)].offset == 9
    assert reloaded.groups["g"].generation == 1

    await coordinator.forget_topic("t")
    assert coordinator.committed("solo") == {} and coordinator.committed("g") == {}


async def test_delete_group_only_when_empty(autojump_clock, coordinator):
    result = await _join_with_handshake(coordinator)
    with pytest.raises(KafkaError) as info:
        await coordinator.delete_group("g")
    assert info.value.code == ErrorCode.non_empty_group
    assert (await coordinator.leave("g", [(result["member_id"], None)]))[0][2] == ErrorCode.none
    await coordinator.delete_group("g")
    assert "g" not in coordinator.groups
    with pytest.raises(KafkaError) as info:
        await coordinator.delete_group("g")
    assert info.value.code == ErrorCode.group_id_not_found


async def test_static_members_rejoin_without_rebalance_leader_included(autojump_clock, coordinator, nursery):
    results = {}

    async def member(instance):
        results[instance] = await coordinator.join(**_join_args(instance=instance))

    nursery.start_soon(member, "i-1")
    nursery.start_soon(member, "i-2")
    await trio.sleep(1)
    group = coordinator.groups["g"]
    leader = group.leader_id
    await coordinator.sync(group_id="g", member_id=leader, generation=group.generation, group_instance_id=None,
                           protocol_type=None, protocol_name=None,
                           assignments={m: m.encode() for m in group.members})
    await trio.sleep(1)
    assert group.state == GroupState.STABLE
    generation = group.generation
    for instance in ("i-1", "i-2"):  # each restarts with a fresh member id, the leader too
        old_id = group.static[instance]
        rejoined = await coordinator.join(**_join_args(instance=instance))
        assert rejoined["error_code"] == ErrorCode.none and rejoined["generation_id"] == generation
        new_id = rejoined["member_id"]
        assert new_id != old_id and group.static[instance] == new_id
        synced = await coordinator.sync(group_id="g", member_id=new_id, generation=generation,
                                        group_instance_id=instance, protocol_type=None, protocol_name=None,
                                        assignments={})
        assert synced["assignment"] == old_id.encode()  # its old assignment, untouched
    assert group.state == GroupState.STABLE and group.generation == generation
    # An admin removes one by its instance id alone (the Java admin's removeMembersFromConsumerGroup):
    # Kafka answers the request's member id (empty), not the id it resolved to.
    assert await coordinator.leave("g", [("", "i-1")]) == [("", "i-1", ErrorCode.none)]
    assert "i-1" not in group.static and len(group.members) == 1


class _SlowFirstSave(EmbeddedGroupStore):
    """A store whose first write is slow, as one PUT can be behind another on S3."""

    def __init__(self, backend) -> None:
        super().__init__(AsyncStore(backend, 2), "ns")
        self.writes = 0

    async def save(self, group) -> None:
        self.writes += 1
        await trio.sleep(1.0 if self.writes == 1 else 0.1)
        await super().save(group)


async def test_concurrent_commits_leave_the_newest_offsets_stored(autojump_clock, nursery, backend):
    """Ten commits in flight at once (pipelined, or several members): every acknowledged one is
    in the store when it returns, the last one stored wins, and the ones that queued behind the
    first write share one write."""
    store = _SlowFirstSave(backend)
    coordinator = GroupCoordinator(store, SETTINGS, offsets_log=NoOffsetsTopic(), configs=EmbeddedGroupConfigs(
        AsyncStore(backend, 2), "ns"), mode=Mode.EMBEDDED, slots=1)
    group = coordinator.check_commit("g", "", -1, None)
    acknowledged = []

    async def commit(offset: int) -> None:
        await coordinator.commit(group, {("t", 0): CommittedOffset(offset)})
        acknowledged.append(offset)

    async with trio.open_nursery() as commits:
        for offset in range(1, 11):
            commits.start_soon(commit, offset)
            await trio.sleep(0.01)
    assert sorted(acknowledged) == list(range(1, 11))
    reloaded = _coordinator(backend)
    await reloaded.load()
    assert reloaded.committed("g")[("t", 0)].offset == 10
    assert store.writes == 2


async def test_long_group_ids_are_named_by_digest_and_old_names_moved(tmp_path):
    from kafscale.gateway.groups.store import StoredGroup
    from kafscale.storage_backends import LocalBackend

    files = EmbeddedGroupStore(AsyncStore(LocalBackend(tmp_path), 2), "ns")  # 255-byte names
    await files.save(StoredGroup("g" * 1000, 3, "consumer", {("t", 0): CommittedOffset(42)}))
    (loaded,) = (await files.load_all()).groups
    assert loaded.group_id == "g" * 1000 and loaded.offsets[("t", 0)].offset == 42
    # An earlier version named a 150-byte id in hex (S3 and memory took it): moved when loaded.
    backend = MemoryBackend()
    store = AsyncStore(backend, 2)
    legacy = "ns/~meta/groups/" + ("h" * 150).encode().hex() + ".json"
    await store.put(legacy, StoredGroup("h" * 150, 1, "consumer", {("t", 1): CommittedOffset(7)}).to_json())
    groups = EmbeddedGroupStore(store, "ns")
    (moved,) = (await groups.load_all()).groups
    assert moved.offsets[("t", 1)].offset == 7 and await store.head(legacy) is None
    assert [g.group_id for g in (await groups.load_all()).groups] == ["h" * 150]


async def test_a_refused_consumer_heartbeat_leaves_a_classic_group_as_it_was(autojump_clock, coordinator):
    """Online migration happens with the first accepted consumer-protocol heartbeat: one the
    group refuses (a bad regex here) leaves the classic group and its members untouched."""
    from kafscale.gateway.groups.classic import ClassicGroup
    from kafscale.gateway.groups.consumer import ConsumerGroup, Heartbeat

    subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"  # v0: topic t
    result = await _join_with_handshake(coordinator, protocols=(("range", subscription),))
    member = result["member_id"]
    await coordinator.sync(group_id="g", member_id=member, generation=1, group_instance_id=None,
                           protocol_type="consumer", protocol_name="range", assignments={member: b""})
    with pytest.raises(KafkaError) as refused:
        await coordinator.consumer_heartbeat("g", Heartbeat("new", 0, rebalance_timeout_ms=1000,
                                                            subscribed_topic_regex="(unclosed"), {"t": 1})
    assert refused.value.code == ErrorCode.invalid_regular_expression
    assert isinstance(coordinator.groups["g"], ClassicGroup) and member in coordinator.groups["g"].members
    await coordinator.consumer_heartbeat("g", Heartbeat("new", 0, rebalance_timeout_ms=1000,
                                                        subscribed_topic_names=("t",)), {"t": 1})
    moved = coordinator.groups["g"]
    assert isinstance(moved, ConsumerGroup) and set(moved.members) == {member, "new"}
    assert moved.members[member].classic is not None and moved.members["new"].classic is None
