"""Gateways with no identity of their own, as a Deployment runs them: each takes a node id
from etcd, and SIGTERM hands its partitions over before it stops, so rolling restarts and
scaling in and out lose and duplicate nothing acknowledged."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

from tests.cluster.conftest import LEASE_MS, Cluster, running, wait_until
from tests.cluster.test_cluster import BackgroundProducer, create_topic, verify

BROKERS = "/kafscale/kafscale/brokers/"


class StallMeter:
    """The longest time the producer's acknowledgements stood still, sampled every 20 ms
    (by the size of its acknowledgement file: one stat, however many acks it holds)."""

    def __init__(self, producer: BackgroundProducer) -> None:
        self._path = producer.path
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        size, since = os.path.getsize(self._path), time.monotonic()
        while not self._stop.wait(0.02):
            now_size, now = os.path.getsize(self._path), time.monotonic()
            if now_size != size:
                size, since = now_size, now
            self.longest = max(self.longest, now - since)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.longest


def test_gateways_without_node_ids_take_distinct_ones_and_a_dead_ones_only_after_its_lease(tmp_path, moto_server,
                                                                                           etcd, request):
    for cluster in running(Cluster(tmp_path, etcd, moto_server, given_ids=False), request):
        ids = cluster.node_ids()
        assert sorted(ids.values()) == [0, 1, 2], ids
        assert {cluster.node_id(g) for g in cluster.gateways} == {0, 1, 2}

        victim = cluster.gateways[1]
        taken = cluster.node_id(victim)
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        killed_at = time.monotonic()
        # Its id is still leased: a gateway starting now gets another one.
        fourth = cluster.add()
        assert cluster.node_id(fourth) == 3
        assert time.monotonic() - killed_at < LEASE_MS / 1000, "the fourth took too long to start to prove this"
        # Once the lease is over, the id is free, and the next gateway takes it (the lowest free one).
        wait_until(lambda: taken not in cluster.node_ids().values(), LEASE_MS / 1000 + 10,  # noqa: B023 (called here)
                   lambda: f"node {taken} still registered: {cluster.node_ids()}")  # noqa: B023
        fifth = cluster.add()
        assert cluster.node_id(fifth) == taken
        # Every live gateway leads some of a new topic's partitions, and clients are told all five.
        create_topic(cluster, "spread", 8)
        owners = cluster.wait_owned("spread", 8, {0, 2, 3, taken})
        assert {node for node, _ in owners.values()} == {0, 2, 3, taken}


@contextmanager
def steady_load(cluster, topic: str, tmp_path, what: str):
    """An idempotent acks=all producer for the body (after 2,000 acknowledgements), the
    longest time its acknowledgements stood still, then every acknowledged record checked:
    at its offset, once."""
    producer = BackgroundProducer(cluster, topic, tmp_path, idempotent=True)
    stalls = None
    try:
        producer.wait_for(2000)
        stalls = StallMeter(producer)
        yield producer
    finally:
        longest = stalls.stop() if stalls else float("nan")
        acked = producer.stop()
    counts = verify(cluster, topic, 6, acked)
    print(f"{what}: {counts}, longest produce stall {longest:.2f} s")
    assert counts["stored"] >= counts["acked"] and counts["duplicated"] == 0, counts
    # Drained gateways hand over at once: a partition left to wait for its owner's lease to
    # end (as a killed gateway's does) would stall producers for at least the lease (3 s).
    assert longest < LEASE_MS / 1000, f"longest produce stall {longest:.2f} s"


def test_a_rolling_restart_under_load_loses_and_duplicates_nothing(tmp_path, moto_server, etcd, request):
    for cluster in running(Cluster(tmp_path, etcd, moto_server, given_ids=False), request):
        create_topic(cluster, "rolling", 6)
        cluster.wait_owned("rolling", 6, {0, 1, 2})
        with steady_load(cluster, "rolling", tmp_path, "rolling restart of 3 gateways") as producer:
            for old in list(cluster.gateways[:3]):
                cluster.add()  # a surge pod first, as a Deployment's rolling update does
                producer.wait_for(producer.acked_count() + 1000)
                started = time.monotonic()
                assert old.stop(signal.SIGTERM, timeout=60) == 0
                print(f"gateway on {old.port} drained and stopped in {time.monotonic() - started:.2f} s")
                cluster.wait_owned("rolling", 6, set(cluster.node_ids().values()), timeout=30)
                producer.wait_for(producer.acked_count() + 1000)


def test_scaling_from_one_to_three_gateways_and_back_under_load(tmp_path, moto_server, etcd, request):
    for cluster in running(Cluster(tmp_path, etcd, moto_server, size=1, given_ids=False), request):
        create_topic(cluster, "scaling", 6)
        cluster.wait_owned("scaling", 6, {0})
        with steady_load(cluster, "scaling", tmp_path, "scaling 1 -> 3 -> 1 gateways") as producer:
            cluster.add()
            cluster.add()
            wait_until(lambda: {n for n, _ in cluster.owners("scaling").values()} == {0, 1, 2}, 30,  # noqa: B023
                       lambda: cluster.owners("scaling"))  # noqa: B023 (called here)
            producer.wait_for(producer.acked_count() + 2000)
            for gateway in cluster.gateways[1:]:
                assert gateway.stop(signal.SIGTERM, timeout=60) == 0
            owners = cluster.wait_owned("scaling", 6, {0}, timeout=30)
            assert {n for n, _ in owners.values()} == {0}
            producer.wait_for(producer.acked_count() + 2000)
