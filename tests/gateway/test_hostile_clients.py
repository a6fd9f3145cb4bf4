"""Broken and hostile clients against an in-process gateway: each test is one way a
single client used to stop a gateway, exhaust its memory or corrupt its offsets."""

import socket
import struct

import pytest
import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from devkit.wire_client import Client, fetch, produce
from devkit.wire_client import start_gateway as _start
from kafscale.protocol import ErrorCode, build_batch, encode_frame
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from kafscale.storage_backends import StorageError


async def _connect(running) -> Client:
    return await Client.connect(running.port)


async def _api_versions_answer_within(running, seconds: float) -> None:
    client = await _connect(running)
    with trio.fail_after(seconds):
        body = await client.call(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert body.error_code == ErrorCode.none


async def _round_trip(running, topic="healthy") -> None:
    """What a normal client needs: a produce acknowledged and read back."""
    client = await _connect(running)
    with trio.fail_after(10):
        body = await client.call(0, 9, produce(topic, build_batch([(None, b"ok")])))
        answer = body.responses[0].partition_responses[0]
        assert answer.error_code == ErrorCode.none
        body = await client.call(1, 12, fetch(topic, answer.base_offset, 100), correlation_id=2)
    assert b"ok" in body.responses[0].partitions[0].records


async def _until(condition, seconds=10.0) -> None:
    with trio.fail_after(seconds):
        while not condition():
            await trio.sleep(0.01)


def _create_topics(name, partitions, validate_only=False):
    return build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout=5000, validate_only=validate_only))


def _create_partitions(name, count, validate_only=False):
    return build(request_class(37, 3), dict(
        topics=[dict(name=name, count=count, assignments=None)], timeout=5000, validate_only=validate_only))


# -- 1. partition counts -------------------------------------------------------------------


@pytest.mark.parametrize("validate_only", [False, True])
async def test_absurd_partition_counts_are_refused(nursery, validate_only):
    running, _ = await _start(nursery)
    client = await _connect(running)
    body = await client.call(19, 5, _create_topics("huge", 2**31 - 1, validate_only))
    assert body.topics[0].error_code == ErrorCode.invalid_partitions
    assert "max_partitions_per_topic" in body.topics[0].error_message
    await client.call(19, 5, _create_topics("small", 2), correlation_id=2)
    body = await client.call(37, 3, _create_partitions("small", 2**31 - 1, validate_only), correlation_id=3)
    assert body.results[0].error_code == ErrorCode.invalid_partitions
    assert "huge" not in running.context.logs.metadata.topics()
    await _api_versions_answer_within(running, 2)


async def test_the_catalog_limit_is_a_policy_violation(nursery):
    running, _ = await _start(nursery, max_partitions_per_topic=100, max_partitions=150)
    client = await _connect(running)
    assert (await client.call(19, 5, _create_topics("a", 100))).topics[0].error_code == ErrorCode.none
    body = await client.call(19, 5, _create_topics("b", 51), correlation_id=2)
    assert body.topics[0].error_code == ErrorCode.policy_violation
    body = await client.call(37, 3, _create_partitions("a", 101), correlation_id=3)
    assert body.results[0].error_code == ErrorCode.invalid_partitions
    assert (await client.call(19, 5, _create_topics("b", 50), correlation_id=4)).topics[0].error_code == ErrorCode.none


async def test_a_stored_topic_over_the_limit_is_not_served_but_can_be_deleted(nursery, tmp_path):
    """A topic an older version accepted: the gateway starts, stays responsive, runs its
    retention passes, and the operator can delete the topic."""
    storage = str(tmp_path / "data")
    running, shutdown = await _start(nursery, storage=storage, max_partitions_per_topic=300_000,
                                     max_partitions=300_000)
    client = await _connect(running)
    assert (await client.call(19, 5, _create_topics("legacy", 262_659))).topics[0].error_code == ErrorCode.none
    shutdown.set()
    await _until(lambda: not running.context.ready)
    await trio.sleep(0.2)

    running, shutdown = await _start(nursery, storage=storage, retention_check_interval_ms=50)
    await trio.sleep(0.3)  # a few retention passes
    await _api_versions_answer_within(running, 2)
    client = await _connect(running)
    metadata = await client.call(3, 12, build(request_class(3, 12), dict(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    assert [t.name for t in metadata.topics] == []
    assert running.context.logs.loaded() == []
    deleted = await client.call(20, 6, build(request_class(20, 6), dict(
        topics=[dict(name="legacy", topic_id=None)], timeout=5000)), correlation_id=2)
    assert deleted.responses[0].error_code == ErrorCode.none
    assert "legacy" not in running.context.logs.metadata.topics()


# -- 2 and 3. memory held for clients --------------------------------------------------------


async def _fill(running, topic: str, megabytes: int) -> None:
    client = await _connect(running)
    value = b"x" * 1_000_000
    for i in range(megabytes):
        body = await client.call(0, 9, produce(topic, build_batch([(None, value)])), correlation_id=i)
        assert body.responses[0].partition_responses[0].error_code == ErrorCode.none


async def test_a_client_that_never_reads_then_vanishes_returns_every_byte(nursery):
    running, _ = await _start(nursery, max_inflight_bytes=64 * 2**20, connection_inflight_bytes=16 * 2**20)
    await _fill(running, "big", 12)
    hog = await _connect(running)

    async def pipeline():
        await hog.send(1, 12, fetch("big", 0, 100, max_bytes=50 * 2**20, partition_max_bytes=50 * 2**20), 1)
        for i in range(40):  # behind an answer it never reads; blocks once the gateway stops reading
            await hog.send(0, 9, produce("other", build_batch([(None, b"y" * 500_000)])), 100 + i)

    async with trio.open_nursery() as hog_tasks:
        hog_tasks.start_soon(pipeline)
        await _until(lambda: running.budget.used > 12 * 2**20)
        await trio.sleep(0.5)
        # The hog holds its share and no more; others are served meanwhile.
        assert running.budget.used <= 16 * 2**20 + 13 * 2**20
        await _round_trip(running)
        hog_tasks.cancel_scope.cancel()
    await hog.stream.aclose()
    await _until(lambda: running.budget.used == 0)
    await _round_trip(running)


async def test_pipelined_huge_fetches_stay_within_the_budget(nursery):
    capacity = 48 * 2**20
    running, _ = await _start(nursery, max_inflight_bytes=capacity, connection_inflight_bytes=16 * 2**20)
    await _fill(running, "big", 8)
    hog = await _connect(running)
    peak = 0
    for i in range(64):
        await hog.send(1, 12, fetch("big", 0, 100, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1), i)
    for _ in range(50):
        await trio.sleep(0.02)
        peak = max(peak, running.budget.used)
    # One connection: its share, plus the one answer (8 MB here) it may overshoot by.
    assert peak <= 16 * 2**20 + 9 * 2**20
    await _round_trip(running)
    await hog.stream.aclose()
    await _until(lambda: running.budget.used == 0)


async def test_fetch_answers_are_capped_by_fetch_max_bytes(nursery):
    running, _ = await _start(nursery, fetch_max_bytes=3 * 2**20)
    await _fill(running, "big", 8)
    client = await _connect(running)
    body = await client.call(1, 12, fetch("big", 0, 100, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1))
    records = body.responses[0].partitions[0].records
    assert 2 * 10**6 < len(records) <= 3 * 2**20


async def test_partial_frames_count_against_the_budget_and_stall_out(nursery):
    capacity = 32 * 2**20
    running, _ = await _start(nursery, max_inflight_bytes=capacity, connection_inflight_bytes=8 * 2**20,
                              connection_stall_ms=1500)
    hogs = []
    for _ in range(6):  # each announces 20 MiB and sends 1 MiB of it
        hog = await _connect(running)
        await hog.stream.send_all(struct.pack(">i", 20 * 2**20) + b"\x00" * 2**20)
        hogs.append(hog)
    await trio.sleep(0.3)
    assert running.budget.used <= capacity  # reserved from the size prefix on, never beyond
    # After the stall timeout the gateway has closed them and taken its memory back.
    await _until(lambda: running.budget.used == 0, seconds=5)
    for hog in hogs:
        assert await hog.receive() is None
    await _round_trip(running)


async def test_an_idle_connection_is_closed(nursery):
    running, _ = await _start(nursery, connections_max_idle_ms=300)
    client = await _connect(running)
    await _round_trip(running)
    with trio.fail_after(3):
        assert await client.receive() is None


async def test_a_long_poll_is_not_idle(nursery):
    running, _ = await _start(nursery, connections_max_idle_ms=300)
    client = await _connect(running)
    await client.call(0, 9, produce("lp", build_batch([(None, b"a")])))
    body = await client.call(1, 12, fetch("lp", 1, 1000), correlation_id=2)  # waits 1 s > idle
    assert body.responses[0].partitions[0].error_code == ErrorCode.none


async def test_a_client_that_stops_reading_is_closed_after_the_stall_time(nursery):
    running, _ = await _start(nursery, connection_stall_ms=500)
    await _fill(running, "big", 12)
    hog = await _connect(running)
    hog.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await hog.send(1, 12, fetch("big", 0, 100, max_bytes=50 * 2**20, partition_max_bytes=50 * 2**20), 1)
    await _until(lambda: running.budget.used > 0)
    await _until(lambda: running.budget.used == 0, seconds=10)
    with trio.fail_after(10):  # the answer was cut off: the connection is closed mid-frame
        assert await hog.receive() is None


# -- 5. smaller ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["abc\n", "abc\r", "a b"])
async def test_topic_names_with_control_characters_are_refused(nursery, name):
    running, _ = await _start(nursery)
    client = await _connect(running)
    body = await client.call(19, 5, _create_topics(name, 1))
    assert body.topics[0].error_code == ErrorCode.invalid_topic_exception
    body = await client.call(0, 9, produce(name, build_batch([(None, b"x")])), correlation_id=2)
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.invalid_topic_exception
    assert running.context.logs.metadata.topics() == {}


async def test_a_null_array_closes_the_connection_with_one_log_line(nursery, caplog):
    running, _ = await _start(nursery)
    client = await _connect(running)
    # CreateTopics v2 (not flexible): header, then the topics array length -1.
    frame = struct.pack(">hhih", 19, 2, 7, 1) + b"t" + struct.pack(">iib", -1, 5000, 0)
    await client.stream.send_all(encode_frame(frame))
    assert await client.receive() is None
    assert not [r for r in caplog.records if r.exc_info]
    assert any("null array" in r.getMessage() for r in caplog.records)
    await _round_trip(running)


async def test_ready_is_false_while_writes_fail_and_true_once_they_work(nursery, monkeypatch):
    from kafscale.gateway.http import readiness as _ready

    running, _ = await _start(nursery)
    ctx = running.context
    assert (await _ready(ctx))[0]
    backend = ctx.logs.store.sync
    await _round_trip(running, "w")

    def failing(*args, **kwargs):
        raise StorageError("No space left on device")

    monkeypatch.setattr(backend, "put_if_absent", failing)
    monkeypatch.setattr(backend, "put", failing)
    client = await _connect(running)
    body = await client.call(0, 9, produce("w", build_batch([(None, b"x")])))
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.kafka_storage_error
    body = await client.call(0, 9, produce("new", build_batch([(None, b"x")])), correlation_id=2)
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.kafka_storage_error  # auto-create
    ready, reason = await _ready(ctx)
    assert not ready and "No space left" in reason
    monkeypatch.undo()
    assert (await _ready(ctx))[0]
    await _round_trip(running, "w")


async def test_ready_answers_in_two_seconds_while_the_store_hangs(nursery, monkeypatch):
    """Issue 20 item 13: a store that takes requests and never answers (every storage thread
    stuck in it) gets a 503 after 2 s, not a probe that hangs with it."""
    import threading

    from kafscale.gateway.http import readiness

    running, _ = await _start(nursery, storage_threads=2)
    ctx = running.context
    backend = ctx.logs.store.sync
    hung = threading.Event()

    def hang(*args, **kwargs):
        hung.wait(60)
        raise StorageError("gave up")

    monkeypatch.setattr(backend, "list", hang)
    try:
        for _ in range(2):  # the second probe finds the first one's thread still stuck
            started = trio.current_time()
            ready, reason = await readiness(ctx)
            assert not ready and "did not answer within 2 s" in reason
            assert trio.current_time() - started < 2.5
    finally:
        hung.set()


async def test_the_inflight_gauge_follows_the_budget(nursery):
    running, _ = await _start(nursery)
    await _fill(running, "big", 4)
    hog = await _connect(running)
    await hog.send(1, 12, fetch("big", 0, 100, max_bytes=50 * 2**20, partition_max_bytes=50 * 2**20), 1)
    await _until(lambda: running.budget.used > 2**20)
    registry = running.context.metrics.registry
    assert registry.get_sample_value("kafscale_inflight_request_bytes") == running.budget.used
    await hog.stream.aclose()
    await _until(lambda: registry.get_sample_value("kafscale_inflight_request_bytes") == 0)


async def test_acks_0_produce_holds_its_memory_until_its_flush(nursery):
    """acks=0 has no answer, but its bytes stay in the budget until they are written, so a
    client producing with acks=0 faster than the store writes is held back, not buffered."""
    running, _ = await _start(nursery, linger_ms=400)
    client = await _connect(running)
    await client.send(0, 9, produce("fire", build_batch([(None, b"z" * 100_000)]), acks=0), 1)
    await _until(lambda: running.budget.used >= 100_000)
    await trio.sleep(0.2)
    assert running.budget.used >= 100_000  # still lingering, still counted
    await _until(lambda: running.budget.used == 0)
    body = await client.call(1, 12, fetch("fire", 0, 100), correlation_id=2)
    assert b"z" * 1000 in body.responses[0].partitions[0].records


async def test_a_topic_named_by_neither_name_nor_id_is_refused_without_reaching_the_catalog(nursery):
    """DeleteTopics v6 and Metadata v12 let a client send a topic entry with no name and no id:
    it is refused as such, never passed on as a topic named None."""
    import uuid

    running, shutdown = await _start(nursery)
    client = await _connect(running)
    deleted = await client.call(20, 6, build(request_class(20, 6), dict(
        topics=[dict(name=None, topic_id=None)], timeout=5000)))
    assert deleted.responses[0].error_code == ErrorCode.invalid_request
    metadata = await client.call(3, 12, build(request_class(3, 12), dict(
        topics=[dict(name=None, topic_id=uuid.UUID(int=0))], allow_auto_topic_creation=True,
        include_topic_authorized_operations=False)), correlation_id=2)
    assert [t.error_code for t in metadata.topics] == [ErrorCode.invalid_topic_exception]
    assert running.context.logs.topics() == {}
    shutdown.set()
