"""``__consumer_offsets`` in a cluster: each partition's owner writes the commits of its
groups from etcd's watch (their coordinators are other gateways), and a gateway taking a
partition over writes all of its groups again; a plain consumer reads every group's
offsets, equal to OffsetFetch, before and after a gateway is killed."""

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import wait_until
from tests.e2e.test_consumer_offsets_topic import commit, read_offsets_topic


def _expected(groups: dict[str, dict[int, int]]) -> dict[tuple[str, str, int], int]:
    return {(group, "cluster-orders", p): o for group, offsets in groups.items() for p, o in offsets.items()}


def _read_when(bootstrap: str, expected: dict, timeout: float = 60) -> dict:
    seen: dict = {}

    def complete() -> bool:
        try:
            seen.update(read_offsets_topic(bootstrap))
        except AssertionError:
            return False  # a partition between owners: read again
        return all(seen.get(key) == value for key, value in expected.items())

    wait_until(complete, timeout, lambda: f"__consumer_offsets holds {seen}, expected {expected}", interval=1)
    return seen


def test_every_groups_commits_are_in_consumer_offsets_across_a_failover(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("cluster-orders", 3, 1)])["cluster-orders"].result(30)
    groups = {f"group-{i}": {p: 10 * i + p for p in range(3)} for i in range(8)}
    for group, offsets in groups.items():
        commit(cluster.bootstrap, group, "cluster-orders", offsets)
    seen = _read_when(cluster.bootstrap, _expected(groups))
    for group in ("group-0", "group-5"):  # what OffsetFetch answers is what the topic says
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        try:
            committed = consumer.committed([TopicPartition("cluster-orders", p) for p in range(3)], timeout=30)
        finally:
            consumer.close()
        assert {(group, c.topic, c.partition): c.offset for c in committed} == \
            {k: v for k, v in seen.items() if k[0] == group}
    cluster.gateways[0].kill()  # its __consumer_offsets partitions move to the others
    live = cluster.live()
    bootstrap = ",".join(g.bootstrap for g in live)
    time.sleep(1)
    for group in list(groups)[:4]:
        groups[group] = {p: 1000 + p for p in range(3)}
        commit(bootstrap, group, "cluster-orders", groups[group])
    _read_when(bootstrap, _expected(groups))
