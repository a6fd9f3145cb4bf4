"""The consumer-protocol group machine (KIP-848) driven alone: members joining, leaving,
dying and heartbeating in any order while topics grow. Whatever the order, no partition is
ever given to two members at once, and once everyone heartbeats (acknowledging what it was
told), the group reaches its target: every subscribed partition with exactly one member,
counts within one of each other."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.gateway.groups.assignors import range_assignor, uniform
from kafscale.gateway.groups.consumer import ConsumerGroup, ConsumerGroupState, Heartbeat
from kafscale.gateway.groups.settings import GroupSettings
from kafscale.protocol import ErrorCode, KafkaError

SETTINGS = GroupSettings(consumer_session_timeout_ms=10_000, consumer_heartbeat_interval_ms=1000)


class Client:
    """What a client does: joins at epoch 0, then sends its epoch and what it owns."""

    def __init__(self, group: ConsumerGroup, name: str, topics=("a",), regex=None, instance=None) -> None:
        self.group, self.member_id, self.epoch, self.owned = group, name, 0, {}
        self.topics, self.regex, self.instance = topics, regex, instance

    def beat(self, catalog, now):
        """As clients do, one fenced or forgotten (its session ended) drops what it owns and joins again."""
        try:
            return self._beat(catalog, now)
        except KafkaError as exc:
            if exc.code not in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
                raise
            self.epoch, self.owned = 0, {}
            return self._beat(catalog, now)

    def _beat(self, catalog, now):
        joining = self.epoch == 0
        beat = Heartbeat(self.member_id, self.epoch, instance_id=self.instance,
                         rebalance_timeout_ms=5000 if joining else -1,
                         subscribed_topic_names=tuple(self.topics) if joining and self.topics else None,
                         subscribed_topic_regex=self.regex if joining else None,
                         owned=dict(self.owned))
        answer = self.group.heartbeat(beat, catalog, now)
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = dict(answer.assignment)  # revoked ones released at once, new ones taken
        return answer


def _held(group):
    seen = {}
    for member in group.members.values():
        for pair in member.holds():
            assert pair not in seen, f"{pair} held by {seen[pair]} and {member.member_id}"
            seen[pair] = member.member_id
    assert group.holders == seen  # the coordinator's index of who holds what agrees
    return seen


def _clients_disjoint(clients):
    """Among the clients the coordinator still counts as members (one silent past its session
    is a zombie Kafka fences too: its commits are refused and its next heartbeat resets it)."""
    seen = {}
    for client in clients:
        if client.member_id not in client.group.members:
            continue
        for topic, partitions in client.owned.items():
            for p in partitions:
                assert (topic, p) not in seen, f"{(topic, p)} consumed by {seen[(topic, p)]} and {client.member_id}"
                seen[(topic, p)] = client.member_id


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "leave", "die", "grow", "wait"]), st.integers(0, 4)),
                max_size=80))
def test_no_partition_is_consumed_twice_and_the_group_converges(script):
    group = ConsumerGroup("g", SETTINGS)
    catalog = {"a": 6, "b": 3}
    clients: dict[int, Client] = {}
    now = 0.0
    for action, n in script:
        try:
            if action == "join" and n not in clients:
                clients[n] = Client(group, f"m{n}", topics=("a", "b") if n % 2 else ("a",))
                clients[n].beat(catalog, now)
            elif action == "beat" and n in clients:
                clients[n].beat(catalog, now)
            elif action == "leave" and n in clients:
                client = clients.pop(n)
                group.heartbeat(Heartbeat(client.member_id, -1), catalog, now)
            elif action == "die" and n in clients:
                clients.pop(n)  # silent from now: its session ends
            elif action == "grow":
                catalog = dict(catalog, a=catalog["a"] + 1)
            elif action == "wait":
                now += 4.0
                group.tick(now)
        except KafkaError as exc:  # only a leave can be refused: a member whose session had ended
            assert action == "leave" and exc.code == ErrorCode.unknown_member_id, exc
        _held(group)
        _clients_disjoint(clients.values())
    now += 11  # the dead ones' sessions end
    for client in clients.values():
        client.beat(catalog, now)
    group.tick(now)
    for _ in range(4):  # a few rounds of everyone heartbeating
        for client in clients.values():
            client.beat(catalog, now)
            _clients_disjoint(clients.values())
    if not clients:
        assert group.state == ConsumerGroupState.EMPTY
        return
    assert group.state == ConsumerGroupState.STABLE
    held = _held(group)
    expected = {("a", p) for p in range(catalog["a"])} | (
        {("b", p) for p in range(3)} if any(n % 2 for n in clients) else set())
    assert set(held) == expected
    if all(n % 2 for n in clients) or not any(n % 2 for n in clients):  # alike subscriptions: even counts
        counts = [len(m.holds()) for m in group.members.values()]
        assert max(counts) - min(counts) <= 1
    # A new coordinator restores the stored snapshot: everyone carries on at its epoch, untouched.
    restored = ConsumerGroup.restore("g", SETTINGS, json.loads(json.dumps(group.snapshot())), {}, now)
    assert restored.holders == group.holders and restored.group_epoch == group.group_epoch
    for client in clients.values():
        client.group = restored
        epoch, owned = client.epoch, dict(client.owned)
        answer = client.beat(catalog, now + 1)
        assert (answer.member_epoch, client.owned) == (epoch, owned)
    assert restored.state == ConsumerGroupState.STABLE and restored.group_epoch == group.group_epoch


def test_a_partition_moves_only_after_its_owner_released_it():
    group = ConsumerGroup("g", SETTINGS)
    catalog = {"a": 2}
    first = Client(group, "first")
    first.beat(catalog, 0)
    assert first.owned == {"a": frozenset({0, 1})}
    second = Client(group, "second")
    answer = second.beat(catalog, 0)
    assert answer.assignment == {}  # its target partition is still the first's
    revoke = group.heartbeat(Heartbeat("first", first.epoch, owned=dict(first.owned)), catalog, 0)
    assert len(revoke.assignment["a"]) == 1 and revoke.member_epoch == first.epoch  # revoke, same epoch
    assert second.beat(catalog, 0).assignment is None  # still not released
    first.owned = dict(revoke.assignment)
    first.beat(catalog, 0)  # acknowledges: released
    assert second.beat(catalog, 0).assignment["a"] == frozenset({0, 1}) - revoke.assignment["a"]


def test_epochs_fence_and_static_members_keep_their_place():
    group = ConsumerGroup("g", SETTINGS)
    catalog = {"a": 4}
    one = Client(group, "one", instance="i-1")
    two = Client(group, "two", instance="i-2")
    for _ in range(3):
        one.beat(catalog, 0)
        two.beat(catalog, 0)
    with pytest.raises(KafkaError) as info:
        group.heartbeat(Heartbeat("one", one.epoch + 5), catalog, 0)
    assert info.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(KafkaError) as info:
        Client(group, "other", instance="i-1").beat(catalog, 0)
    assert info.value.code == ErrorCode.unreleased_instance_id
    epoch, kept = group.group_epoch, dict(two.owned)
    group.heartbeat(Heartbeat("two", -2), catalog, 1)  # a static member leaves for now
    back = Client(group, "two-again", instance="i-2")
    answer = back.beat(catalog, 2)
    assert answer.assignment == kept and group.group_epoch == epoch  # same partitions, no new epoch
    group.check_commit("two-again", back.epoch, "i-2", 2)
    with pytest.raises(KafkaError) as info:
        group.check_commit("two-again", back.epoch + 1, "i-2", 2)
    assert info.value.code == ErrorCode.stale_member_epoch


def test_regex_subscriptions_follow_new_topics_and_bad_patterns_are_refused():
    group = ConsumerGroup("g", SETTINGS)
    client = Client(group, "m", topics=(), regex="orders-.*")
    client.beat({"orders-eu": 2, "payments": 2}, 0)
    assert set(client.owned) == {"orders-eu"}
    client.beat({"orders-eu": 2, "orders-us": 1, "payments": 2}, 1)
    assert set(client.owned) == {"orders-eu", "orders-us"}
    epoch = group.group_epoch
    with pytest.raises(KafkaError) as info:
        Client(group, "bad", topics=(), regex="(a)\\1").beat({}, 0)  # a backreference: not RE2
    assert info.value.code == ErrorCode.invalid_regular_expression
    assert "bad" not in group.members and group.group_epoch == epoch  # refused before it counted


def test_assignors():
    subscriptions = {"m1": frozenset({"a", "b"}), "m2": frozenset({"a", "b"}), "m3": frozenset({"a"})}
    counts = {"a": 4, "b": 4}
    ranged = range_assignor(subscriptions, counts, {})
    assert ranged["m1"] == {"a": frozenset({0, 1}), "b": frozenset({0, 1})}  # co-partitioned
    assert ranged["m3"] == {"a": frozenset({3})}
    spread = uniform(subscriptions, counts, {})
    sizes = sorted(sum(len(p) for p in a.values()) for a in spread.values())
    assert sum(sizes) == 8 and sizes[-1] - sizes[0] <= 1
    again = uniform(dict(subscriptions, m4=frozenset({"a", "b"})), counts, spread)
    moved = sum(len(spread[m].get(t, frozenset()) - again[m].get(t, frozenset())) for m in spread for t in counts)
    assert moved == 2  # sticky: only what the newcomer needs moves
