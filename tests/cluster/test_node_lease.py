"""Node ids held under etcd leases, against a real etcd: gateways claiming at the same moment
get distinct ids, a revoked or expired holder's id is the next one taken, a given id held by
a live gateway is refused, and a gateway that lost its lease takes its own id back."""

from __future__ import annotations

import trio

from kafscale.gateway.cluster.node_lease import NodeIdTaken, NodeLease
from kafscale.gateway.etcd import EtcdClient

ROOT = "/kafscale/test/"


def _lease(client: EtcdClient, requested="auto", port: int = 9092) -> NodeLease:
    return NodeLease(client, ROOT, 2, requested, "127.0.0.1", port, (("PLAINTEXT", "127.0.0.1", port),))


async def test_concurrent_claims_get_distinct_ids_and_a_freed_id_is_taken_next(etcd):
    client = EtcdClient([etcd.endpoint], 5000)
    try:
        leases = [_lease(client, port=9000 + i) for i in range(6)]
        async with trio.open_nursery() as nursery:
            for lease in leases:
                nursery.start_soon(lease.claim, 5.0)
        assert sorted(lease.node_id for lease in leases) == [0, 1, 2, 3, 4, 5]
        async with trio.open_nursery() as keeping:  # the holders stay alive (2 s leases)
            for lease in leases:
                keeping.start_soon(lease.keep)
            registered = {kv.key.rsplit("/", 1)[1]: kv.lease for kv in await client.get_prefix(ROOT + "brokers/")}
            assert registered == {str(lease.node_id): lease.lease for lease in leases}  # each under its own lease

            freed = next(lease for lease in leases if lease.node_id == 3)
            await freed.revoke()
            newcomer = _lease(client, port=9100)
            await newcomer.claim(5.0)
            assert newcomer.node_id == 3
            keeping.start_soon(newcomer.keep)
            # A given id held by a live gateway is waited for, then refused with the holder named.
            holder = next(lease for lease in leases if lease.node_id == 4)
            with trio.fail_after(10):
                try:
                    await _lease(client, requested=4, port=9200).claim(1.0)
                    raise AssertionError("a held id was claimed twice")
                except NodeIdTaken as exc:
                    assert "node id 4 is taken by a live gateway" in str(exc)
                    assert f'"port": {holder._port}' in str(exc)
            keeping.cancel_scope.cancel()
    finally:
        await client.aclose()


async def test_a_gateway_whose_lease_ended_takes_its_own_id_back(etcd):
    client = EtcdClient([etcd.endpoint], 5000)
    try:
        lease = _lease(client)
        await lease.claim(5.0)
        first = lease.lease
        await client.lease_revoke(first)  # as if etcd had expired it during a long pause
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lease.keep)
            with trio.fail_after(10):
                while lease.lease == first or not lease.valid():
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        assert lease.node_id == 0 and lease.claims == 2
        (kv,) = await client.get_prefix(ROOT + "brokers/")
        assert kv.lease == lease.lease
    finally:
        await client.aclose()


async def test_an_auto_id_taken_by_another_gateway_meanwhile_stops_this_one(etcd):
    client = EtcdClient([etcd.endpoint], 5000)
    try:
        lease = _lease(client)
        await lease.claim(5.0)
        await client.lease_revoke(lease.lease)
        other = _lease(client, port=9300)
        await other.claim(5.0)  # a new gateway took the lowest free id: this one's
        assert other.node_id == lease.node_id
        async with trio.open_nursery() as keeping:
            keeping.start_soon(other.keep)
            with trio.fail_after(20):
                try:
                    await lease.keep()
                    raise AssertionError("keep() returned")
                except NodeIdTaken as exc:
                    assert "was taken by another gateway while this one was cut off" in str(exc)
            keeping.cancel_scope.cancel()
    finally:
        await client.aclose()
