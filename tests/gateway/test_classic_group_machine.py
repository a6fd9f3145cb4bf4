"""The classic group machine driven alone (no trio, no store): random members joining,
syncing, heartbeating, leaving and falling silent while time passes. Whatever the order,
every transition is one of the table's, each parked request is answered exactly once, and a
tick leaves no deadline behind it (the driver would spin on one)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.gateway.groups.classic import (
    ClassicGroup,
    GroupState,
    JoinAnswer,
    JoinRequest,
    Parked,
    SyncAnswer,
)
from kafscale.gateway.groups.settings import GroupSettings
from kafscale.protocol import KafkaError

SETTINGS = GroupSettings(min_session_timeout_ms=1000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=500)

steps = st.lists(st.tuples(st.sampled_from(["join", "rejoin", "sync", "heartbeat", "leave", "wait"]),
                           st.integers(0, 3), st.floats(0, 12)), max_size=60)


def _request(member_id: str, instance: str | None) -> JoinRequest:
    return JoinRequest(member_id, instance, "c", "h", 5000, 4000, "consumer", [("range", b"m")], True, False)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_random_members_never_break_the_machine(script):
    group = ClassicGroup("g", SETTINGS)
    now = 0.0
    known: dict[int, str] = {}  # client number → its member id
    parked: dict[tuple[str, str], int] = {}  # (kind, member id) → requests waiting

    def settle():
        for effect in group.take_effects():
            if isinstance(effect, JoinAnswer | SyncAnswer):
                key = ("join" if isinstance(effect, JoinAnswer) else "sync", effect.member_id)
                assert parked.pop(key, 0) > 0, f"an answer nobody waits for: {key}"
                if isinstance(effect, JoinAnswer) and effect.result["error_code"] == 0:
                    assert effect.member_id in group.members

    for action, client, seconds in script:
        instance = f"i-{client}" if client == 3 else None  # one static member
        try:
            if action in ("join", "rejoin"):
                member_id = known.get(client, "") if action == "rejoin" else ""
                outcome = group.join(_request(member_id, instance), now)
                if isinstance(outcome, Parked):
                    parked[("join", outcome.member_id)] = parked.get(("join", outcome.member_id), 0) + 1
                    known[client] = outcome.member_id
                else:
                    known[client] = outcome["member_id"]
            elif action == "sync" and client in known:
                outcome = group.sync(member_id=known[client], generation=group.generation,
                                     group_instance_id=instance, protocol_type=None, protocol_name=None,
                                     assignments={m: b"a" for m in group.members}, now=now)
                if isinstance(outcome, Parked):
                    parked[("sync", outcome.member_id)] = parked.get(("sync", outcome.member_id), 0) + 1
            elif action == "heartbeat" and client in known:
                group.heartbeat(member_id=known[client], generation=group.generation, group_instance_id=instance,
                                now=now)
            elif action == "leave" and client in known:
                group.leave([(known[client], instance)], now)
            elif action == "wait":
                now += seconds
                group.tick(now)
        except KafkaError:
            pass  # a refusal is an answer too
        settle()
        deadline = group.next_deadline()
        if action == "wait":
            assert deadline is None or deadline > now or (
                group.state == GroupState.PREPARING_REBALANCE and group.all_joined()), (deadline, now)
    # Time runs out for everyone: every parked request has had its answer.
    for _ in range(10):
        now += 100
        group.tick(now)
        settle()
    for (kind, member_id), count in parked.items():
        assert count == 0 or member_id in group.members and kind == "sync", (kind, member_id, group.state)
