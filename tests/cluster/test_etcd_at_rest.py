"""What a gateway asks of etcd at rest: its lease keepalives, whatever the number of
transactional ids (issue 38 item 11: the transaction sweep read every id's key each
second, so the load grew with ids x gateways)."""

from __future__ import annotations

import re
import time

import httpx
import trio

from devkit.wire_client import Client
from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.cluster.conftest import ready, wait_until
from tests.support.gateway_process import GatewayProcess

IDS = 1000


def _etcd_requests(gateway: GatewayProcess) -> float:
    text = httpx.get(f"http://127.0.0.1:{gateway.http_port}/metrics", timeout=10).text
    return float(re.search(r"^kafscale_etcd_requests (\S+)$", text, re.M).group(1))


async def _init_ids(port: int) -> None:
    await _init_ids_of(port, IDS)


async def _init_ids_of(port: int, count: int) -> None:
    client = await Client.connect(port)
    try:
        for i in range(count):
            body = await client.call(22, 4, build(request_class(22, 4), dict(
                transactional_id=f"app-{i}", transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)),
                correlation_id=i)
            assert body.error_code == ErrorCode.none, body.error_code
    finally:
        await client.stream.aclose()


def test_etcd_requests_at_rest_do_not_grow_with_transactional_ids(tmp_path, etcd):
    gateway = GatewayProcess(tmp_path / "data", "--etcd-endpoints", etcd.endpoint, "--node-id", "0").start()
    try:
        wait_until(lambda: ready(gateway), 30, "the gateway did not become ready")
        trio.run(_init_ids, gateway.port)
        time.sleep(2)  # the last writes settle
        before, started = _etcd_requests(gateway), time.monotonic()
        time.sleep(10)
        rate = (_etcd_requests(gateway) - before) / (time.monotonic() - started)
        print(f"etcd requests at rest: {rate:.2f}/s with {IDS} transactional ids")
        # The lease keepalives (one per lease_ttl_ms / 3; 0.5/s at the default 6 s); a sweep
        # reading the ids would add one request a second (and a range of 1,000 keys each).
        assert rate <= 0.75, f"{rate:.2f} etcd requests/s at rest with {IDS} transactional ids"
    finally:
        gateway.kill()


def test_unreadable_keys_in_etcd_are_skipped_not_fatal(tmp_path, etcd):
    """Issue 38 item 1's audit: a broker or owner key that does not parse (written by hand,
    damaged) ended the watch task, and with it the gateway."""
    import base64

    def put(key: str, value: bytes) -> None:
        etcd.call("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                 "value": base64.b64encode(value).decode()})

    gateway = GatewayProcess(tmp_path / "data", "--etcd-endpoints", etcd.endpoint, "--node-id", "0").start()
    try:
        wait_until(lambda: ready(gateway), 30, "the gateway did not become ready")
        put("/kafscale/kafscale/brokers/99", b"{not json")
        put("/kafscale/kafscale/owners/t/zero", b'{"node": "x"}')
        time.sleep(2)
        assert gateway.process.poll() is None, gateway.log_path.read_text()[-3000:]
        assert ready(gateway)
        trio.run(_init_ids_of, gateway.port, 3)  # and it serves
        log = gateway.log_path.read_text()
        assert "etcd key /kafscale/kafscale/brokers/99 is unreadable (skipped)" in log
    finally:
        gateway.kill()
