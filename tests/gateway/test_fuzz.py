"""Fuzz the gateway in-process: mutated frames of real clients and generated requests.
Nothing may crash it, hang a connection or keep memory; a real client still gets through
after every batch. ``scripts/fuzz.py`` runs the same for longer."""

import logging
import random

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kafscale.gateway.server import serve
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.api_versions import ApiKey
from tests.support.fuzz import FuzzReport, RecordingProxy, fuzz, generated_frames, mutate
from tests.support.wire_client import Client, config, fetch, produce

log = logging.getLogger("fuzz")

FUZZ_CONFIG = dict(
    request_timeout_ms=3000, max_partitions_per_topic=64, max_partitions=2000,
    group_min_session_timeout_ms=100, group_max_session_timeout_ms=3000, group_initial_rebalance_delay_ms=0,
)


def _real_clients(bootstrap: str) -> None:
    """What the suites' clients send: admin calls, a producer per codec, a consumer group."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("fuzzed", num_partitions=3, replication_factor=1)])["fuzzed"].result(10)
    admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "fuzzed")])
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                             "enable.idempotence": codec == "zstd"})
        for i in range(50):
            producer.produce("fuzzed", key=b"%d" % i, value=b"value-%d" % i)
        assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-group", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 3000})
    consumer.subscribe(["fuzzed"])
    seen = 0
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen += 1
        if seen >= 100:
            break
    consumer.commit(asynchronous=False)
    consumer.close()


async def _round_trip(port: int) -> None:
    client = await Client.connect(port)
    try:
        with trio.fail_after(10):
            body = await client.call(0, 9, produce("healthy", build_batch([(None, b"ok")])))
            answer = body.responses[0].partition_responses[0]
            assert answer.error_code == ErrorCode.none
            body = await client.call(1, 12, fetch("healthy", answer.base_offset, 100), correlation_id=2)
            assert b"ok" in body.responses[0].partitions[0].records
    finally:
        await client.stream.aclose()


def _produce_and_consume_with_confluent(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce("after-fuzz", value=b"still-here")
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "after", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("after-fuzz", 0, 0)])
    try:
        for _ in range(20):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                assert message.value() == b"still-here"
                return
        pytest.fail("the message produced after fuzzing was not read back")
    finally:
        consumer.close()


async def run_campaign(nursery, mutations: int, generated: int, seed: int, batch: int = 250) -> FuzzReport:
    shutdown = trio.Event()
    proxy = RecordingProxy()
    await nursery.start(proxy.run)
    # Clients follow Metadata to the advertised address: advertise the proxy so it sees everything.
    running = await nursery.start(serve, config(advertised_port=proxy.port, **FUZZ_CONFIG), shutdown)
    proxy.target_port = running.port
    await trio.to_thread.run_sync(_real_clients, f"127.0.0.1:{proxy.port}")
    captured = [frame for frame in proxy.frames if frame]
    assert len(captured) > 50, "the real clients should have sent many requests"
    rng = random.Random(seed)
    frames = [mutate(rng.choice(captured), rng) for _ in range(mutations)]
    frames += generated_frames(generated, seed)
    rng.shuffle(frames)

    report = FuzzReport()
    for start in range(0, len(frames), batch):
        await fuzz(running.port, frames[start:start + batch], report=report)
        await _round_trip(running.port)  # still serving between batches
    await trio.to_thread.run_sync(_produce_and_consume_with_confluent, f"127.0.0.1:{running.port}")
    with trio.fail_after(10):  # every fuzz connection is gone: every byte came back
        while running.budget.used:
            await trio.sleep(0.05)
    errors = running.context.metrics.registry.get_sample_value
    report.unexpected = int(sum(errors("kafscale_request_errors_total", {"api": key.name}) or 0 for key in ApiKey))
    log.warning("fuzz: %s", report.line())
    shutdown.set()
    return report


async def test_fuzzing_neither_crashes_nor_hangs_nor_leaks(nursery):
    report = await run_campaign(nursery, mutations=3500, generated=1500, seed=20261122)
    assert report.frames == 5000
    assert not report.hangs, f"{len(report.hangs)} frames got neither an answer nor a close: {report.hangs[:3]!r}"
    assert report.answered > 500 and report.closed > 100  # both outcomes were exercised
    assert report.unexpected == 0  # no handler met a request it could not answer with a Kafka error
