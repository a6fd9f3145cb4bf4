"""A gateway that cannot join the cluster says why and exits 1; it never hangs."""

from __future__ import annotations

import pytest

from devkit.ports import free_port
from tests.cluster.conftest import LEASE_MS
from tests.support.gateway_process import GatewayProcess


def _start_failing(gateway: GatewayProcess, timeout: float) -> str:
    with pytest.raises(RuntimeError) as info:
        gateway.start(timeout=timeout)
    assert gateway.process.returncode == 1
    return str(info.value)


def test_unreachable_etcd_is_a_clear_start_up_error(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    gateway = GatewayProcess(tmp_path / "data", "--etcd-endpoints", dead, "--etcd-timeout-ms", "1000")
    message = _start_failing(gateway, timeout=30)
    assert "etcd" in message and dead in message and "unreachable" in message


def test_a_node_id_held_by_a_live_gateway_is_refused(tmp_path, etcd):
    args = ["--etcd-endpoints", etcd.endpoint, "--lease-ttl-ms", str(LEASE_MS), "--cluster-refresh-ms", "200",
            "--node-id", "7"]
    first = GatewayProcess(tmp_path / "a", *args).start()
    try:
        message = _start_failing(GatewayProcess(tmp_path / "b", *args), timeout=30)
        assert "node id 7 is taken by a live gateway" in message and str(first.port) in message
    finally:
        first.kill()
    # Once the dead gateway's lease runs out, its id can be used again.
    again = GatewayProcess(tmp_path / "c", *args).start(timeout=LEASE_MS / 1000 + 20)
    again.kill()


def test_a_different_coordinator_slot_count_is_refused(tmp_path, etcd):
    common = ["--etcd-endpoints", etcd.endpoint, "--lease-ttl-ms", str(LEASE_MS), "--cluster-refresh-ms", "200"]
    first = GatewayProcess(tmp_path / "a", *common, "--node-id", "0").start()
    try:
        message = _start_failing(GatewayProcess(tmp_path / "b", *common, "--node-id", "1",
                                                "--coordinator-slots", "8"), timeout=30)
        assert "coordinator_slots is 8 but the cluster uses 16" in message
    finally:
        first.kill()
