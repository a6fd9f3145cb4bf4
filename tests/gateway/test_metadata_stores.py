"""Both topic catalogs (embedded in the store, and etcd) answer Kafka errors, not KeyError."""

import pytest
import trio

from devkit.etcd_server import EtcdServer
from kafscale.gateway.etcd import EtcdClient
from kafscale.gateway.metadata import EmbeddedMetadataStore, EtcdMetadataStore
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.storage_backends import MemoryBackend


@pytest.fixture(params=["embedded", "etcd"])
async def catalog(request, tmp_path):
    if request.param == "embedded":
        yield EmbeddedMetadataStore(AsyncStore(MemoryBackend(), 2), "kafscale")
        return
    server = await trio.to_thread.run_sync(lambda: EtcdServer(tmp_path).start())
    client = EtcdClient([server.endpoint], 5000)
    try:
        yield EtcdMetadataStore(client, "/kafscale/test/")
    finally:
        await client.aclose()
        await trio.to_thread.run_sync(server.stop)


async def test_updating_a_topic_that_is_gone_is_unknown_topic(catalog):
    await catalog.load()
    await catalog.create_topic("t", 2, {})
    await catalog.update_topic("t", configs={"retention.ms": "1000"})
    await catalog.delete_topic("t")
    with pytest.raises(KafkaError) as caught:
        await catalog.update_topic("t", partitions=4)
    assert caught.value.code == ErrorCode.unknown_topic_or_partition
