"""The status console of a three-gateway cluster: each gateway's page shows every gateway and
every partition's leader, and offsets of the partitions it leads; together they equal what
kafscale-admin reports, and Chromium renders them."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import Producer

from tests.cluster.test_cluster import create_topic
from tests.support import console_page


def test_the_consoles_of_three_gateways_agree_with_the_admin_command(cluster, tmp_path):
    create_topic(cluster, "audit", 6)
    cluster.wait_owned("audit", 6, {0, 1, 2})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(120):
        producer.produce("audit", value=b"a%d" % i, partition=i % 6)
    assert producer.flush(20) == 0
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", cluster.bootstrap, "--json",
                           "topics", "describe", "audit"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    described = {p["partition"]: p for p in json.loads(done.stdout)["partitions"]}
    seen: dict[int, int] = {}
    for gateway in cluster.gateways:
        page = console_page.fetch(gateway.http_port)
        nodes = console_page.table(page, "node")
        assert len(nodes) == 3 and sum(int(n["partitions led"]) >= 2 for n in nodes) == 3
        for row in console_page.table(page, "topic"):
            if row["topic"] != "audit":
                continue
            partition = int(row["partition"])
            assert int(row["leader"]) == described[partition]["leader"]
            if row["log end"] != "\u2013":  # offsets of the partitions this gateway leads
                seen[partition] = int(row["log end"])
    assert seen == {p: d["log_end"] for p, d in described.items()}  # each partition shown by its leader
    dom = console_page.render_in_chromium(f"http://127.0.0.1:{cluster.gateways[1].http_port}/",
                                          tmp_path / "console.png")
    assert "cluster mode" in dom and "Kafscale gateway, node 1" in dom
