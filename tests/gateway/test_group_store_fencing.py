"""The etcd group store writes only under the lease that owns the group's slot: a coordinator
paused past its lease, woken up, cannot write its older state over its successor's."""

import pytest
import trio

from devkit.etcd_server import EtcdServer
from kafscale.gateway.etcd import EtcdClient, put_op
from kafscale.gateway.groups.store import CommittedOffset, EtcdGroupStore, StoredGroup, slot_of
from kafscale.protocol import ErrorCode, KafkaError

ROOT = "/kafscale/test/"
SLOTS = 4


async def test_only_the_slot_owners_lease_writes(tmp_path):
    server = await trio.to_thread.run_sync(lambda: EtcdServer(tmp_path).start())
    client = EtcdClient([server.endpoint], 5000)
    try:
        old_lease, new_lease = await client.lease_grant(60), await client.lease_grant(60)
        owner_key = f"{ROOT}owners/~groups/{slot_of('g', SLOTS)}"
        await client.put(owner_key, b'{"node": 0, "epoch": 1}', old_lease)
        former = EtcdGroupStore(client, ROOT, SLOTS, lease=lambda: old_lease)
        await former.save(StoredGroup("g", 1, "consumer", {("t", 0): CommittedOffset(10)}))
        # The slot moves: the new owner's key, under its lease (the former's is gone).
        await client.txn([], [put_op(owner_key, b'{"node": 1, "epoch": 2}', new_lease)])
        successor = EtcdGroupStore(client, ROOT, SLOTS, lease=lambda: new_lease)
        await successor.save(StoredGroup("g", 2, "consumer", {("t", 0): CommittedOffset(20)}))
        with pytest.raises(KafkaError) as refused:  # the former wakes up and writes what it had
            await former.save(StoredGroup("g", 1, "consumer", {("t", 0): CommittedOffset(15)}))
        assert refused.value.code == ErrorCode.not_coordinator
        with pytest.raises(KafkaError):
            await former.delete("g")
        (stored,) = (await successor.load_slot(slot_of("g", SLOTS), SLOTS)).groups
        assert stored.offsets[("t", 0)].offset == 20
    finally:
        await client.aclose()
        await trio.to_thread.run_sync(server.stop)
