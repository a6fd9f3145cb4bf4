"""Both transaction stores (objects in the store alone, etcd in a cluster): every change is
a compare-and-swap on the version read, so of two coordinators one wins."""

import pytest
import trio

from devkit.etcd_server import EtcdServer
from kafscale.gateway.etcd import EtcdClient
from kafscale.gateway.storage import AsyncStore
from kafscale.gateway.transactions.store import ABSENT, EmbeddedTransactionStore, EtcdTransactionStore, TransactionChanged
from kafscale.protocol.transactions import Transaction, TxnState
from kafscale.storage_backends import LocalBackend, MemoryBackend


@pytest.fixture(params=["memory", "file", "etcd"])
async def transactions(request, tmp_path):
    if request.param == "memory":
        yield EmbeddedTransactionStore(AsyncStore(MemoryBackend(), 2), "kafscale")
        return
    if request.param == "file":
        yield EmbeddedTransactionStore(AsyncStore(LocalBackend(tmp_path / "data"), 2), "kafscale")
        return
    server = await trio.to_thread.run_sync(lambda: EtcdServer(tmp_path).start())
    client = EtcdClient([server.endpoint], 5000)
    try:
        yield EtcdTransactionStore(client, "/kafscale/test/")
    finally:
        await client.aclose()
        await trio.to_thread.run_sync(server.stop)


async def test_of_two_writers_that_read_one_version_only_the_first_lands(transactions):
    assert await transactions.get("app/1") is None
    fresh = Transaction("app/1", producer_id=4, producer_epoch=0, timeout_ms=60_000)
    await transactions.put(fresh, ABSENT)
    with pytest.raises(TransactionChanged):  # created twice
        await transactions.put(fresh, ABSENT)
    read = await transactions.get("app/1")
    assert read is not None and read.transaction == fresh
    ongoing = fresh.with_partitions(4, 0, [("t", 0)], now_ms=5)
    await transactions.put(ongoing, read.version)
    with pytest.raises(TransactionChanged):  # a paused coordinator that read the same version
        await transactions.put(fresh.reinitialized(60_000, 6), read.version)
    now = await transactions.get("app/1")
    assert now is not None and now.transaction == ongoing and now.version != read.version
    prepared = ongoing.ending(4, 0, commit=True, now_ms=7)
    await transactions.put(prepared, now.version)
    assert [s.transaction.state for s in await transactions.list()] == [TxnState.PREPARE_COMMIT]


async def test_ids_of_any_length_kafka_allows_are_kept(transactions):
    """A 1,000-byte id (Kafka allows 32,767): the filesystem's 255-byte names once refused it."""
    for transactional_id in ("a" * 1000, "é" * 5000, "b" * 101):
        fresh = Transaction(transactional_id, producer_id=7, producer_epoch=0, timeout_ms=60_000)
        await transactions.put(fresh, ABSENT)
        read = await transactions.get(transactional_id)
        assert read is not None and read.transaction == fresh
        ongoing = fresh.with_partitions(7, 0, [("t", 0)], now_ms=5)
        await transactions.put(ongoing, read.version)
    assert {s.transaction.transactional_id for s in await transactions.list()} == {"a" * 1000, "é" * 5000, "b" * 101}


async def test_a_long_id_stored_by_an_earlier_version_is_moved_to_its_digest_name(tmp_path):
    """S3 and the memory store took hex names of up to 500 bytes: they are moved when loaded."""
    backend = MemoryBackend()
    store = AsyncStore(backend, 2)
    old = Transaction("c" * 150, producer_id=9, producer_epoch=3, timeout_ms=60_000)
    legacy_key = "kafscale/~meta/transactions/" + ("c" * 150).encode().hex() + ".json"
    await store.put(legacy_key, old.to_json().replace(b'"id": "' + b"c" * 150 + b'", ', b""))  # as written then
    transactions = EmbeddedTransactionStore(store, "kafscale")
    (listed,) = await transactions.list()
    assert listed.transaction == old
    assert await store.head(legacy_key) is None
    read = await transactions.get("c" * 150)
    assert read is not None and read.transaction == old and read.version == listed.version
    await transactions.put(old.reinitialized(60_000, 10), read.version)  # its version is the new key's


async def test_a_delete_lands_only_on_the_version_read(transactions):
    fresh = Transaction("gone", producer_id=1, producer_epoch=0, timeout_ms=60_000)
    await transactions.put(fresh, ABSENT)
    read = await transactions.get("gone")
    if isinstance(transactions, EtcdTransactionStore):  # alone the coordinator is the only writer
        await transactions.put(fresh.with_partitions(1, 0, [("t", 0)], now_ms=5), read.version)
        with pytest.raises(TransactionChanged):
            await transactions.delete("gone", read.version)
        read = await transactions.get("gone")
    await transactions.delete("gone", read.version)
    assert await transactions.get("gone") is None
