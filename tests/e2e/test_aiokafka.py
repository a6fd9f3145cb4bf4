"""aiokafka 0.14 against a real gateway process (asyncio, so plain asyncio.run)."""

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


async def _roundtrip(bootstrap: str, topic: str, codec):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=0,
                                       headers=[("h", b"%d" % i)], timestamp_ms=1_700_000_000_000 + i)
                   for i in range(150)]
        acked = [(await f).offset for f in futures]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        while len(got) < 150:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            if not batch:
                break
            got.extend(batch[tp])
        by_time = await consumer.offsets_for_times({tp: 1_700_000_000_100})
    finally:
        await consumer.stop()
    return acked, got, by_time[tp]


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume(gateway, codec):
    topic = f"aio-{codec or 'none'}"
    acked, got, by_time = asyncio.run(_roundtrip(gateway.bootstrap, topic, codec))
    assert acked == list(range(150))
    assert [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in got] == [
        (i, b"k%d" % i, b"value-%d" % i, [("h", b"%d" % i)], 1_700_000_000_000 + i) for i in range(150)
    ]
    assert by_time.offset == 100
