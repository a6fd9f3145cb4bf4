"""Placement: every topic spread evenly over the live gateways; few partitions move on a change."""

from hypothesis import given
from hypothesis import strategies as st

from kafscale.gateway.cluster.placement import Placement


@given(st.integers(1, 300), st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True),
       st.text(alphabet="abcdefgh.-_", min_size=1, max_size=12))
def test_every_gateway_leads_floor_or_ceiling_of_its_share(partitions, brokers, topic):
    owners = Placement(brokers).topic(topic, partitions)
    assert len(owners) == partitions and set(owners) <= set(brokers)
    counts = [owners.count(b) for b in brokers]
    assert max(counts) - min(counts) <= 1
    assert Placement(list(reversed(brokers))).topic(topic, partitions) == owners  # same on every gateway


def _moved(before, after) -> float:
    return sum(1 for a, b in zip(before, after, strict=True) if a != b) / len(before)


def test_a_joining_or_leaving_gateway_moves_about_its_share():
    for n in (3, 5, 10, 30):
        brokers = list(range(n))
        moved_join, moved_leave = [], []
        for t in range(20):
            topic = f"topic-{t}"
            now = Placement(brokers).topic(topic, 600)
            moved_join.append(_moved(now, Placement(brokers + [n]).topic(topic, 600)))
            moved_leave.append(_moved(now, Placement(brokers[1:]).topic(topic, 600)))
        # The unavoidable minimum is 1/(n+1) on a join and 1/n on a leave; exact evenness adds
        # some overflow (measured 1.1x at 3 gateways to 2.2x at 30); round-robin moves nearly all.
        assert sum(moved_join) / 20 < 3 / (n + 1), (n, sum(moved_join) / 20)
        assert sum(moved_leave) / 20 < 3 / n, (n, sum(moved_leave) / 20)


def test_group_slots_and_small_topics_use_every_gateway_once_before_any_twice():
    assert sorted(Placement([0, 1, 2]).topic("~groups", 16).count(b) for b in (0, 1, 2)) == [5, 5, 6]
    assert sorted(Placement([4, 7, 9]).topic("t", 2)) in ([4, 7], [4, 9], [7, 9])
