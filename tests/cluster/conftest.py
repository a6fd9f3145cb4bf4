"""Three gateways on loopback sharing one S3 bucket (moto) and one real etcd."""

from __future__ import annotations

import json
import sys
import time
import urllib.request

import pytest

from devkit.etcd_server import EtcdServer
from kafscale.protocol.layout import parse_segment_key
from kafscale.protocol.segment import SEGMENT_HEADER_SIZE, parse_segment_footer, parse_segment_header
from kafscale.storage_backends import ObjectNotFound, open_store
from tests.support.gateway_process import GatewayProcess

LEASE_MS = 3000
COMPACTION_DELAY_MS = 1000


def wait_until(condition, timeout: float, message, interval: float = 0.1) -> None:
    """Poll ``condition`` until it holds; after ``timeout`` seconds fail with ``message``
    (a string, or a callable giving one from the state at that moment)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message() if callable(message) else message)
        time.sleep(interval)


class Cluster:
    def __init__(self, tmp_path, etcd: EtcdServer, s3_server, size: int = 3, etcd_endpoints: str = "",
                 given_ids: bool = True) -> None:
        self.etcd = etcd  # the member the test reads owners from
        self.etcd_endpoints = etcd_endpoints or etcd.endpoint
        self.s3 = s3_server  # MotoServer or SeaweedServer
        self.location = s3_server.location()
        self.tmp_path = tmp_path
        # Given ids: gateway i is node i. Otherwise each takes one from etcd (node_id auto).
        self.given_ids = given_ids
        self.gateways = [self._gateway(i) for i in range(size)]

    def _gateway(self, index: int) -> GatewayProcess:
        identity = ["--node-id", str(index)] if self.given_ids else []
        gateway = GatewayProcess(
            self.tmp_path / f"gw{index}", "--storage", self.location, *self.s3.gateway_args(),
            *identity, "--etcd-endpoints", self.etcd_endpoints,
            "--lease-ttl-ms", str(LEASE_MS), "--cluster-refresh-ms", "200",
            "--group-initial-rebalance-delay-ms", "0", "--log-level", "DEBUG",
            # Compaction and the janitor run throughout the failovers, not after them.
            "--compaction-delay-ms", str(COMPACTION_DELAY_MS), "--cleaner-backoff-ms", "300",
        )
        gateway.log_path = self.tmp_path / f"gateway-{index}.log"
        return gateway

    def add(self) -> GatewayProcess:
        gateway = self._gateway(len(self.gateways))
        self.gateways.append(gateway)
        return gateway.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(g.bootstrap for g in self.gateways)

    def live(self) -> list[GatewayProcess]:
        return [g for g in self.gateways if g.process is not None and g.process.poll() is None]

    def node_ids(self) -> dict[int, int]:
        """Kafka port → node id of every gateway registered in etcd."""
        prefix = "/kafscale/kafscale/brokers/"
        return {json.loads(v)["port"]: int(key[len(prefix):]) for key, v in self.etcd.get_prefix(prefix).items()}

    def node_id(self, gateway: GatewayProcess) -> int:
        return self.node_ids()[gateway.port]

    def owners(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition → (node id, epoch), as recorded in etcd."""
        prefix = f"/kafscale/kafscale/owners/{topic}/"
        return {int(key[len(prefix):]): (json.loads(v)["node"], json.loads(v)["epoch"])
                for key, v in self.etcd.get_prefix(prefix).items()}

    def coordinator_of_slot(self, slot: int, nodes: set[int], timeout: float = 30) -> int:
        """The node owning a group-coordinator slot, once one of ``nodes`` owns it."""
        key = f"/kafscale/kafscale/owners/~groups/{slot}"
        seen: dict = {}

        def owned() -> bool:
            found = self.etcd.get_prefix(key).get(key)
            seen["node"] = json.loads(found)["node"] if found is not None else None
            return seen["node"] in nodes

        wait_until(owned, timeout, f"slot {slot} has no owner among {nodes}")
        return seen["node"]

    def wait_owned(self, topic: str, partitions: int, nodes: set[int], timeout: float = 30) -> dict:
        """Until every partition is owned by one of ``nodes`` (the live gateways); returns
        the owners that satisfied it."""
        seen: dict = {}

        def settled() -> bool:
            owners = seen["owners"] = self.owners(topic)
            return len(owners) == partitions and {n for n, _ in owners.values()} <= nodes

        wait_until(settled, timeout, lambda: f"partitions of {topic} not owned by {nodes}: {seen['owners']}")
        return seen["owners"]

    def segment_ranges(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(base, last) offsets of the partition's segment objects, read from the bucket as a
        reader sees them: the gateways keep merging while this lists, and a merge grows the
        first segment of a run in place and then deletes the rest, so each object is read
        whole (one version), a deleted one is skipped, and one contained in another dropped."""
        store = open_store(self.location, s3=self.s3.options())
        ranges = []
        for info in store.list(f"kafscale/{topic}/{partition}/"):
            if parse_segment_key(info.key) is None:
                continue
            try:
                data = store.get(info.key)
            except ObjectNotFound:
                continue
            header = parse_segment_header(data[:SEGMENT_HEADER_SIZE])
            ranges.append((header.base_offset, parse_segment_footer(data).last_offset))
        return sorted(r for r in ranges
                      if not any(o != r and o[0] <= r[0] and r[1] <= o[1] for o in ranges))

    def log_entry_ranges(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(base, last) offsets of the partition's entries in the shared log objects."""
        from kafscale.spark_connector.planning import read_catalog
        from kafscale.spark_connector.stored_log import LogEntries

        store = open_store(self.location, s3=self.s3.options())
        entries = LogEntries(store, "kafscale").of(read_catalog(store, "kafscale")[topic], partition)
        return sorted((e.base_offset, e.last_offset) for e in entries)

    def stop(self) -> None:
        for gateway in self.gateways:
            gateway.kill()


def ready(gateway: GatewayProcess) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway.http_port}/readyz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def etcd(tmp_path):
    server = EtcdServer(tmp_path).start()
    yield server
    server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.call_failed = report.failed
    return report


# What a failed cluster test prints of each gateway's log: the cluster's decisions and
# whatever went wrong, without the per-request debug lines.
_TELLING = ("WARNING", "ERROR", "owns", "adopt", "group", "coordinat", "release", "took over", "fenced")


def _print_telling_logs(cluster: Cluster) -> None:
    for gateway in cluster.gateways:
        lines = [line for line in gateway.logs().splitlines() if any(word in line for word in _TELLING)]
        print(f"---- gateway {gateway.port}: {len(lines)} telling lines, the last 150 ----", file=sys.stderr)
        print("\n".join(lines[-150:]), file=sys.stderr)


def running(cluster: Cluster, request):
    try:
        for gateway in cluster.gateways:
            gateway.start()
        yield cluster
        if getattr(request.node, "call_failed", False):
            _print_telling_logs(cluster)
    finally:
        cluster.stop()


@pytest.fixture
def cluster(tmp_path, etcd, moto_server, request):
    yield from running(Cluster(tmp_path, etcd, moto_server), request)


@pytest.fixture
def seaweed_cluster(tmp_path, etcd, seaweed_server, request):
    """The same three gateways on SeaweedFS (another S3 implementation, real SigV4)."""
    yield from running(Cluster(tmp_path, etcd, seaweed_server), request)
