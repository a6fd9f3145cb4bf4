"""KIP-848's online migration, driven on the pure machines: a stable classic group becomes a
consumer-protocol group when a consumer-protocol member joins, its classic members carry on
inside it (joining again when told, giving partitions up before anyone else gets them),
and the group goes back to classic when the last consumer-protocol member leaves."""

import io
import struct

import pytest
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.serial import entity_writer

from kafscale.gateway.groups.classic import ClassicGroup, GroupState, JoinAnswer, JoinRequest, Parked
from kafscale.gateway.groups.consumer import ConsumerGroup, Heartbeat
from kafscale.gateway.groups.migration import downgraded, upgraded
from kafscale.gateway.groups.settings import GroupSettings
from kafscale.gateway.groups.store import CommittedOffset
from kafscale.protocol import ErrorCode, KafkaError
from kafscale.protocol.consumer_protocol import decode_assignment, encode_assignment

SETTINGS = GroupSettings(min_session_timeout_ms=1000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0,
                         consumer_session_timeout_ms=10_000)
TOPICS = {"t": 6}


def subscription(owned: dict[str, frozenset[int]]) -> bytes:
    """A cooperative member's subscription (version 1: it names what it owns)."""
    entity = subscription_v1.ConsumerProtocolSubscription
    body = entity(topics=("t",), user_data=None, owned_partitions=tuple(
        subscription_v1.TopicPartition(topic=t, partitions=tuple(sorted(p))) for t, p in owned.items() if p))
    out = io.BytesIO()
    out.write(struct.pack(">h", 1))
    entity_writer(entity)(out, body)
    return out.getvalue()


class ClassicClient:
    """A cooperative classic consumer: joins, syncs, heartbeats; told to rebalance, it joins
    again naming what it owns; synced, it drops what it was not given back."""

    def __init__(self, member_id: str) -> None:
        self.member_id, self.generation, self.owned = member_id, -1, {}

    def request(self) -> JoinRequest:
        return JoinRequest(self.member_id, None, "c", "h", 10_000, 10_000, "consumer",
                           [("cooperative-sticky", subscription(self.owned))], False, False)

    def rejoin(self, group: ConsumerGroup, now: float) -> None:
        joined = group.classic_join(self.request(), TOPICS, now)
        self.member_id, self.generation = joined["member_id"], joined["generation_id"]
        synced = group.classic_sync(self.member_id, self.generation, None)
        self.owned = decode_assignment(synced["assignment"])

    def beat(self, group: ConsumerGroup, now: float) -> None:
        try:
            group.classic_heartbeat(self.member_id, self.generation, None, now)
        except KafkaError as exc:
            assert exc.code == ErrorCode.rebalance_in_progress
            self.rejoin(group, now)


class ConsumerClient:
    def __init__(self, member_id: str) -> None:
        self.member_id, self.epoch, self.owned = member_id, 0, {}

    def beat(self, group: ConsumerGroup, now: float) -> None:
        joining = self.epoch == 0
        answer = group.heartbeat(Heartbeat(self.member_id, self.epoch, rebalance_timeout_ms=10_000 if joining else -1,
                                           subscribed_topic_names=("t",) if joining else None, owned=dict(self.owned)),
                                 TOPICS, now)
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = dict(answer.assignment)


def stable_classic_group() -> tuple[ClassicGroup, list[ClassicClient]]:
    """Two cooperative classic members at generation 1, three partitions each, and offsets."""
    group = ClassicGroup("g", SETTINGS, offsets={("t", 0): CommittedOffset(42)})
    clients = [ClassicClient(""), ClassicClient("")]
    for client in clients:
        parked = group.join(client.request(), 0.0)
        assert isinstance(parked, Parked)
        client.member_id = parked.member_id
    group.tick(0.0)  # the join completes: answers in the outbox
    answers = {effect.member_id: effect.result for effect in group.take_effects() if isinstance(effect, JoinAnswer)}
    for client in clients:
        client.generation = answers[client.member_id]["generation_id"]
    halves = {clients[0].member_id: {"t": frozenset({0, 1, 2})}, clients[1].member_id: {"t": frozenset({3, 4, 5})}}
    group.sync(member_id=group.leader_id, generation=1, group_instance_id=None, protocol_type="consumer",
               protocol_name="cooperative-sticky",
               assignments={m: encode_assignment(a) for m, a in halves.items()}, now=0.0)
    for client in clients:
        client.owned = halves[client.member_id]
    assert group.state == GroupState.STABLE
    return group, clients


def owned_once(clients) -> set[tuple[str, int]]:
    """What the clients consume: never one partition by two at once."""
    seen: set[tuple[str, int]] = set()
    for client in clients:
        mine = {(t, p) for t, ps in client.owned.items() for p in ps}
        assert not mine & seen, f"{mine & seen} consumed twice"
        seen |= mine
    return seen


def test_a_classic_group_moves_to_the_consumer_protocol_and_back_without_a_partition_consumed_twice():
    classic, classics = stable_classic_group()
    group = upgraded(classic, SETTINGS, TOPICS, now=1.0)
    assert (group.group_epoch, group.offsets[("t", 0)].offset) == (1, 42)
    for client in classics:  # nothing moved: their heartbeats carry on at their generation
        client.beat(group, 1.0)
        assert client.generation == 1
    newcomer = ConsumerClient("c-1")
    everyone = [*classics, newcomer]
    for round_ in range(8):  # the newcomer's arrival moves partitions, one step per heartbeat
        for client in everyone:
            client.beat(group, 2.0 + round_)
            owned_once(everyone)
    assert owned_once(everyone) == {("t", p) for p in range(6)}
    assert sorted(len(c.owned.get("t", ())) for c in everyone) == [2, 2, 2]
    with pytest.raises(KafkaError) as stale:  # a classic member's commit carries its generation
        group.check_commit(classics[0].member_id, classics[0].generation - 1, None, 11.0)
    assert stale.value.code == ErrorCode.illegal_generation
    group.check_commit(classics[0].member_id, classics[0].generation, None, 11.0)

    group.heartbeat(Heartbeat("c-1", -1), TOPICS, 12.0)  # the last consumer-protocol member leaves
    assert group.only_classic_members
    back = downgraded(group, now=12.0)
    assert back.state == GroupState.PREPARING_REBALANCE and back.offsets[("t", 0)].offset == 42
    for client in classics:  # they keep what they hold until they join again
        assert decode_assignment(back.members[client.member_id].assignment) == client.owned
        with pytest.raises(KafkaError) as told:
            back.heartbeat(member_id=client.member_id, generation=client.generation, group_instance_id=None, now=12.0)
        assert told.value.code == ErrorCode.rebalance_in_progress


def test_a_classic_group_in_a_rebalance_or_of_another_protocol_is_not_converted():
    classic, clients = stable_classic_group()
    classic.join(clients[0].request(), 1.0)  # a new join: preparing a rebalance
    with pytest.raises(KafkaError) as refused:
        upgraded(classic, SETTINGS, TOPICS, now=1.0)
    assert refused.value.code == ErrorCode.group_id_not_found


def test_a_consumer_group_hosts_a_classic_member_that_joins_it():
    group = ConsumerGroup("g", SETTINGS)
    first = ConsumerClient("c-1")
    first.beat(group, 0.0)
    joiner = ClassicClient("")
    joiner.rejoin(group, 1.0)  # an unknown (empty) member id: a new classic member
    clients = [first, joiner]
    for round_ in range(6):
        for client in clients:
            client.beat(group, 2.0 + round_)
            owned_once(clients)
    assert sorted(len(c.owned.get("t", ())) for c in clients) == [3, 3]
    snapshot = group.snapshot()  # a restarted coordinator keeps the classic member as it was
    restored = ConsumerGroup.restore("g", SETTINGS, snapshot, {}, now=9.0)
    assert restored.members[joiner.member_id].classic == group.members[joiner.member_id].classic
    assert restored.classic_sync(joiner.member_id, joiner.generation, None)["assignment"] == \
        encode_assignment(joiner.owned)
    refusal = JoinRequest("", None, "c", "h", 10_000, 10_000, "consumer", [("range", b"\x00")], False, False)
    with pytest.raises(KafkaError) as bad:
        group.classic_join(refusal, TOPICS, 10.0)
    assert bad.value.code == ErrorCode.inconsistent_group_protocol


def test_an_eager_member_joining_again_with_nothing_owned_gets_its_partitions_back():
    """An eager classic member gives everything up before it joins again, even when nothing
    changed: its partitions come back in its SyncGroup (they were not lost to the group)."""
    group = ConsumerGroup("g", SETTINGS)
    first = ConsumerClient("c-1")
    first.beat(group, 0.0)
    eager = ClassicClient("")
    eager.rejoin(group, 1.0)
    for round_ in range(6):
        for client in (first, eager):
            client.beat(group, 2.0 + round_)
    assert sorted(len(c.owned.get("t", ())) for c in (first, eager)) == [3, 3]
    held = eager.owned
    eager.owned = {}  # eager: revoked everything before joining again
    eager.rejoin(group, 9.0)
    assert eager.owned == held
