"""The server in-process (trio, real TCP on loopback, memory storage): pipelining,
ordering, backpressure limits and graceful shutdown."""

import datetime
import struct

import pytest
import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from devkit.wire_client import Client
from devkit.wire_client import config as _config
from devkit.wire_client import fetch as _fetch
from devkit.wire_client import produce as _produce
from devkit.wire_client import start_gateway as _start
from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.server import StartupError, serve
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import decode_response, request_class


async def test_pipelined_requests_are_answered_in_order_and_appended_in_order(nursery):
    running, shutdown = await _start(nursery)
    client = await Client.connect(running.port)
    for i in range(50):
        await client.send(0, 9, _produce("p", build_batch([(None, b"%d" % i)])), correlation_id=i)
        if i % 10 == 0:
            await client.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                              correlation_id=1000 + i)
    order, offsets = [], []
    for _ in range(55):
        payload = await client.receive()
        (correlation_id,) = struct.unpack_from(">i", payload)
        order.append(correlation_id)
        if correlation_id < 1000:
            _, body = decode_response(0, 9, payload)
            offsets.append(body.responses[0].partition_responses[0].base_offset)
    expected = []
    for i in range(50):
        expected.append(i)
        if i % 10 == 0:
            expected.append(1000 + i)
    assert order == expected
    assert offsets == list(range(50))  # arrival order is offset order
    registry = running.context.metrics.registry
    assert registry.get_sample_value("kafscale_requests_total", {"api": "PRODUCE", "version": "9"}) == 50
    assert registry.get_sample_value("kafscale_request_seconds_count", {"api": "PRODUCE"}) == 50
    assert registry.get_sample_value("kafscale_requests_total", {"api": "API_VERSIONS", "version": "3"}) == 5
    shutdown.set()


async def test_long_poll_fetch_waits_for_min_bytes_then_wakes_on_produce(nursery):
    running, shutdown = await _start(nursery)
    consumer = await Client.connect(running.port)
    producer = await Client.connect(running.port)
    await producer.send(0, 9, _produce("lp", build_batch([(None, b"first")])), 1)
    await producer.receive()
    fetch = _fetch("lp", offset=1, max_wait_ms=10_000)
    started = trio.current_time()
    await consumer.send(1, 12, fetch, 2)
    await trio.sleep(0.2)
    await producer.send(0, 9, _produce("lp", build_batch([(None, b"second")])), 3)
    _, body = decode_response(1, 12, await consumer.receive())
    waited = trio.current_time() - started
    partition = body.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none and partition.high_watermark == 2
    assert b"second" in partition.records
    assert 0.2 <= waited < 5  # woken by the produce, not by the 10 s max wait
    shutdown.set()


async def test_fetch_max_wait_expires_with_an_empty_answer(nursery):
    running, shutdown = await _start(nursery)
    client = await Client.connect(running.port)
    await client.send(0, 9, _produce("mw", build_batch([(None, b"x")])), 1)
    await client.receive()
    fetch = _fetch("mw", offset=1, max_wait_ms=300)
    started = trio.current_time()
    await client.send(1, 12, fetch, 2)
    _, body = decode_response(1, 12, await client.receive())
    assert 0.25 <= trio.current_time() - started < 3
    assert body.responses[0].partitions[0].records in (b"", None)
    shutdown.set()


async def test_graceful_shutdown_answers_accepted_produce(nursery):
    running, shutdown = await _start(nursery, linger_ms=60_000, flush_bytes=1 << 30)
    client = await Client.connect(running.port)
    await client.send(0, 9, _produce("g", build_batch([(None, b"x")])), 1)
    await trio.sleep(0.1)  # accepted, waiting for its (very long) linger
    shutdown.set()
    _, body = decode_response(0, 9, await client.receive())
    assert body.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert await client.receive() is None  # then the connection is closed


async def test_a_produce_whose_partition_never_loads_times_out_and_the_connection_goes_on(nursery, monkeypatch):
    # The connection runs a Produce's admission without a cancel scope; what the handler
    # must await (here a partition log that never loads) is bounded by the request's deadline.
    running, shutdown = await _start(nursery, request_timeout_ms=300)

    async def never_loads(self, topic, partition):
        await trio.sleep_forever()

    monkeypatch.setattr(type(running.context.logs), "get", never_loads)
    client = await Client.connect(running.port)
    with trio.fail_after(10):
        started = trio.current_time()
        await client.send(0, 9, _produce("never", build_batch([(None, b"x")])), 1)
        await client.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 2)
        _, body = decode_response(0, 9, await client.receive())
        assert body.responses[0].partition_responses[0].error_code == ErrorCode.request_timed_out
        assert 0.3 <= trio.current_time() - started < 5
        _, versions = decode_response(18, 3, await client.receive())  # read after the Produce, in order
        assert versions.error_code == ErrorCode.none
    shutdown.set()


async def test_an_answer_not_durable_by_the_clients_timeout_is_answered_timed_out_in_order(nursery):
    # The flush never comes within the Produce's 300 ms: the connection's watchdog hands the
    # waiting answer to its writer, which answers it as timed out; what was read behind it
    # is answered after it, and the record is acknowledged once a later flush lands.
    running, shutdown = await _start(nursery, linger_ms=2_000, flush_bytes=1 << 30)
    client = await Client.connect(running.port)
    request = _produce("late", build_batch([(None, b"x")]))
    request = type(request)(transactional_id=None, acks=-1, timeout=datetime.timedelta(milliseconds=300),
                            topic_data=request.topic_data)
    with trio.fail_after(10):
        await client.send(0, 9, request, 1)
        await client.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 2)
        started = trio.current_time()
        _, body = decode_response(0, 9, await client.receive())
        waited = trio.current_time() - started
        partition = body.responses[0].partition_responses[0]
        assert partition.error_code == ErrorCode.request_timed_out
        assert 0.25 <= waited < 1.5  # at its deadline, not at the 2 s flush
        _, versions = decode_response(18, 3, await client.receive())
        assert versions.error_code == ErrorCode.none
        await client.send(0, 9, _produce("late", build_batch([(None, b"y")])), 3)
        _, body = decode_response(0, 9, await client.receive())
        assert body.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert body.responses[0].partition_responses[0].base_offset == 1  # the timed-out one was stored
    shutdown.set()


async def test_oversized_frame_closes_the_connection(nursery):
    running, shutdown = await _start(nursery, max_frame_bytes=1024)
    client = await Client.connect(running.port)
    await client.stream.send_all(struct.pack(">i", 4096) + b"x" * 100)
    assert await client.receive() is None
    shutdown.set()


async def test_port_in_use_is_a_clear_startup_error(nursery):
    running, shutdown = await _start(nursery)
    with pytest.raises(StartupError, match="cannot listen"):
        await serve(_config(port=running.port), trio.Event())
    shutdown.set()


async def test_bad_storage_location_is_a_clear_startup_error():
    with pytest.raises(StartupError, match="cannot use storage"):
        await serve(GatewayConfig.of(port=0, http_port=-1, storage="ftp://x"), trio.Event())


async def test_a_client_resetting_its_connection_does_not_stop_the_server(nursery):
    import socket as socket_module

    running, shutdown = await _start(nursery)
    for _ in range(3):
        client = await Client.connect(running.port)
        await client.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 1)
        await client.receive()
        # SO_LINGER 0: close() sends a TCP reset instead of a FIN.
        client.stream.setsockopt(socket_module.SOL_SOCKET, socket_module.SO_LINGER, struct.pack("ii", 1, 0))
        await client.stream.aclose()
    await trio.sleep(0.1)
    survivor = await Client.connect(running.port)
    await survivor.send(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 7)
    assert struct.unpack_from(">i", await survivor.receive())[0] == 7
    shutdown.set()


async def _serving_at_epoch_3(nursery):
    """A gateway whose partitions are at leader epoch 3 (as after moves in a cluster), and a client."""
    from kafscale.gateway.ownership import SoleGateway

    class OwnerAtEpoch3(SoleGateway):
        def leader(self, topic, partition):
            return (self.node_id, 3)

    running, shutdown = await _start(nursery)
    running.context.logs.ownership = OwnerAtEpoch3(0, "127.0.0.1", running.port)
    return running, shutdown, await Client.connect(running.port)


async def test_offset_for_leader_epoch_follows_the_partition_epoch(nursery):
    """KIP-320 answers against the epoch the partition was loaded under (in a cluster, the
    owner's); the log is never truncated, so a valid epoch always ends at the high watermark."""
    running, shutdown, client = await _serving_at_epoch_3(nursery)
    await client.send(0, 9, _produce("ep", build_batch([(None, b"a"), (None, b"b"), (None, b"c")])), 1)
    await client.receive()

    async def ask(current, epoch):
        body = build(request_class(23, 4), dict(replica_id=-1, topics=[dict(topic="ep", partitions=[
            dict(partition=0, current_leader_epoch=current, leader_epoch=epoch)])]))
        await client.send(23, 4, body, 2)
        _, answer = decode_response(23, 4, await client.receive())
        row = answer.topics[0].partitions[0]
        return row.error_code, row.leader_epoch, row.end_offset

    assert await ask(3, 1) == (ErrorCode.none, 1, 3)
    assert await ask(-1, 3) == (ErrorCode.none, 3, 3)
    assert (await ask(2, 1))[0] == ErrorCode.fenced_leader_epoch  # the client's metadata is older
    assert (await ask(4, 1))[0] == ErrorCode.unknown_leader_epoch  # the client knows a newer leader
    assert (await ask(3, 5))[1:] == (-1, -1)  # an epoch this partition never had
    shutdown.set()


async def test_fetch_and_list_offsets_check_the_current_leader_epoch(nursery):
    """A client with stale metadata is told FENCED_LEADER_EPOCH (one ahead of us,
    UNKNOWN_LEADER_EPOCH), as Kafka's leader does, so it refreshes; -1 skips the check."""
    running, shutdown, client = await _serving_at_epoch_3(nursery)
    await client.send(0, 9, _produce("fe", build_batch([(None, b"a")])), 1)
    await client.receive()

    async def fetch_with(epoch):
        body = build(request_class(1, 12), dict(
            replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[dict(topic="fe", partitions=[dict(
                partition=0, current_leader_epoch=epoch, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
        await client.send(1, 12, body, 2)
        return decode_response(1, 12, await client.receive())[1].responses[0].partitions[0].error_code

    async def list_with(epoch):
        body = build(request_class(2, 7), dict(replica_id=-1, isolation_level=0, topics=[dict(name="fe", partitions=[
            dict(partition_index=0, current_leader_epoch=epoch, timestamp=-1)])]))
        await client.send(2, 7, body, 3)
        return decode_response(2, 7, await client.receive())[1].topics[0].partitions[0].error_code

    for ask in (fetch_with, list_with):
        assert await ask(2) == ErrorCode.fenced_leader_epoch
        assert await ask(4) == ErrorCode.unknown_leader_epoch
        assert await ask(3) == ErrorCode.none
        assert await ask(-1) == ErrorCode.none
    shutdown.set()


async def test_not_leader_answers_name_the_leader_and_its_endpoint(nursery):
    """KIP-951: Produce v10+ and Fetch v16+ carry the current leader and its address with
    NOT_LEADER_OR_FOLLOWER, so a client goes there without a Metadata round."""
    from kafscale.gateway.ownership import Broker, SoleGateway

    class LedElsewhere(SoleGateway):
        def brokers(self):
            return [self.me, Broker(7, "other.example", 9999)]

        def leader(self, topic, partition):
            return (7, 4)

        def owns(self, topic, partition):
            return False

    running, shutdown = await _start(nursery)
    await running.context.logs.create_topic("far", 1)
    running.context.logs.ownership = LedElsewhere(0, "127.0.0.1", running.port)
    client = await Client.connect(running.port)
    body = build(request_class(0, 11), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[dict(
        name="far", partition_data=[dict(index=0, records=build_batch([(None, b"x")]))])]))
    await client.send(0, 11, body, 1)
    _, answer = decode_response(0, 11, await client.receive())
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (7, 4)
    assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [(7, "other.example", 9999)]

    topic_id = running.context.logs.topics()["far"].topic_id
    fetch = build(request_class(1, 17), dict(
        cluster_id=None, replica_state=dict(replica_id=-1, replica_epoch=-1), max_wait=0, min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=[dict(
            topic_id=topic_id, partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                last_fetched_epoch=-1, log_start_offset=-1,
                                                partition_max_bytes=1 << 20, replica_directory_id=None)])],
        forgotten_topics_data=[], rack_id=""))
    await client.send(1, 17, fetch, 2)
    _, answer = decode_response(1, 17, await client.receive())
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (7, 4)
    assert [e.node_id for e in answer.node_endpoints] == [7]
    shutdown.set()


async def test_a_lone_gateway_whose_store_a_newer_run_took_over_stops_writing(nursery, tmp_path):
    """Issue 20 item 3, through the server's own wiring: alone, a seal of every partition in
    this run's writer means a newer run of the gateway took the store over. The older run
    must write nothing more (a cluster member would go on as a new writer) and say so."""
    from kafscale.gateway.http import readiness
    from kafscale.protocol.layout import log_prefix

    storage = f"file://{tmp_path}"
    older, _ = await _start(nursery, storage=storage, fsync=False)
    client = await Client.connect(older.port)
    answer = await client.call(0, 9, _produce("t", build_batch([(None, b"first")])))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    newer, _ = await _start(nursery, storage=storage, fsync=False)  # seals the older run at start
    answer = await client.call(0, 9, _produce("t", build_batch([(None, b"late")])))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    objects = [i.key for i in await older.context.logs.store.list(log_prefix("kafscale"))]
    answer = await client.call(0, 9, _produce("t", build_batch([(None, b"later")])))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    assert [i.key for i in await older.context.logs.store.list(log_prefix("kafscale"))] == objects  # nothing new
    ok, reason = await readiness(older.context)
    assert not ok and "newer run" in reason
    reader = await Client.connect(newer.port)
    data = (await reader.call(1, 12, _fetch("t", offset=0, max_wait_ms=0))).responses[0].partitions[0]
    assert data.high_watermark == 1


async def test_readiness_sees_a_newer_run_before_the_next_write(nursery, tmp_path):
    """Issue 38 item 12: /readyz stayed 200 after a newer run took a lone gateway's store
    over, until the older run next tried to write."""
    from kafscale.gateway.http import readiness

    storage = f"file://{tmp_path}"
    older, _ = await _start(nursery, storage=storage, fsync=False)
    assert (await readiness(older.context))[0]
    await _start(nursery, storage=storage, fsync=False)  # seals the older run at start
    ok, reason = await readiness(older.context)
    assert not ok and "newer run" in reason
    client = await Client.connect(older.port)  # and it writes nothing: its producers go elsewhere
    answer = await client.call(0, 9, _produce("t", build_batch([(None, b"late")])))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
