"""Fetch reserves memory for what its answer holds, not a topic's whole max.message.bytes:
a topic allowing 200 MiB batches is read like any other, and a first batch larger than the
memory budget is still served, alone, as Kafka serves the first batch whatever its size."""

import time

import pytest
import trio

from devkit.wire_client import Client, create_topic, start_gateway
from devkit.wire_client import fetch as fetch_request
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from kafscale.protocol.records import Record, split_batches


async def _produce(client, topic, value):
    batch = build_batch([Record(0, int(time.time() * 1000), b"k", value)])
    body = await client.call(0, 9, build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000,
                             topic_data=[dict(name=topic, partition_data=[dict(index=0, records=batch)])])))
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.none


@pytest.mark.parametrize("budget, value_size", [
    (256 * 2**20, 1000),  # the default budget, a 200 MiB topic limit: was never served
    (4 * 2**20, 6 * 2**20),  # a batch larger than all the memory the budget has
])
async def test_a_large_max_message_bytes_is_read(nursery, budget, value_size):
    running, _ = await start_gateway(nursery, max_inflight_bytes=budget, connection_inflight_bytes=budget // 4)
    client = await Client.connect(running.port)
    await create_topic(client, "big", max_message_bytes=str(200 * 2**20))
    value = b"v" * value_size
    await _produce(client, "big", value)
    body = await client.call(1, 12, fetch_request("big", 0, 0, max_bytes=2**20, partition_max_bytes=2**20))
    partition = body.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none and partition.high_watermark == 1
    data = bytes(partition.records or b"")
    assert [header.records_count for header in split_batches(data)] == [1] and value in data
    await client.stream.aclose()
    deadline = time.monotonic() + 5
    while running.budget.used and time.monotonic() < deadline:  # the connection's end gives it all back
        await trio.sleep(0.01)
    assert running.budget.used == 0
