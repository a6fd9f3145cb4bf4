"""Gateways given every member of a three-member etcd cluster keep working when one member dies."""

from __future__ import annotations

import signal

from devkit.etcd_server import etcd_cluster
from tests.cluster.conftest import LEASE_MS, Cluster, ready, running
from tests.cluster.test_cluster import BackgroundProducer, create_topic, verify


def test_losing_one_etcd_member_changes_nothing_for_clients(tmp_path, moto_server, request):
    members = etcd_cluster(tmp_path, 3)
    try:
        endpoints = ",".join(m.endpoint for m in members)
        for cluster in running(Cluster(tmp_path, members[1], moto_server, etcd_endpoints=endpoints), request):
            create_topic(cluster, "quorum", 6)
            cluster.wait_owned("quorum", 6, {0, 1, 2})
            producer = BackgroundProducer(cluster, "quorum", tmp_path, idempotent=True)
            try:
                producer.wait_for(2000)
                members[0].stop()  # kill -9 one member; the other two keep a quorum
                producer.wait_for(producer.acked_count() + 2000)
                # Leases, watches and ownership still work: a gateway dying now still fails over.
                cluster.gateways[2].process.send_signal(signal.SIGKILL)
                cluster.gateways[2].process.wait()
                cluster.wait_owned("quorum", 6, {0, 1}, timeout=LEASE_MS / 1000 + 10)
                producer.wait_for(producer.acked_count() + 2000)
                assert ready(cluster.gateways[0]) and ready(cluster.gateways[1])
            finally:
                acked = producer.stop()
            counts = verify(cluster, "quorum", 6, acked)
            assert counts["duplicated"] == 0, counts
    finally:
        for member in members:
            member.stop()
