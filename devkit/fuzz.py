"""Fuzzing an in-process gateway with hostile frames.

Two sources of frames: mutations of frames real clients sent (captured through a
recording proxy in front of the gateway), and structure-aware requests generated
from kio's schemas for every (api key, version) the gateway serves. Each frame
goes on its own connection followed by an ApiVersions sentinel: the gateway must
answer the sentinel or close the connection within a deadline; anything else is a
hang. The gateway running at all afterwards means no crash; the caller checks
that a real client still gets through and that every byte of memory came back.

The campaign (:func:`run_campaign`) is run by ``tests/gateway/test_fuzz.py`` (bounded for
CI), ``bench limits`` and ``scripts/fuzz.py`` (as long as you like).
"""

from __future__ import annotations

import logging
import random
import resource
import struct
from dataclasses import dataclass, field

import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.static.primitive import Records

from kafscale.gateway.handlers import REGISTRY
from kafscale.gateway.server import serve
from kafscale.protocol import ErrorCode, FrameDecoder, build_batch, encode_frame
from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.messages import RequestHeader, encode_request, request_class

from .wire_client import Client, config, fetch, produce

__all__ = ["FuzzReport", "RecordingProxy", "fuzz", "generated_frames", "mutate"]

_SENTINEL_ID = 0x5E17
_SENTINEL = encode_frame(encode_request(
    RequestHeader(18, 3, _SENTINEL_ID, "fuzz"), ApiVersionsRequest(client_software_name="f", client_software_version="1")))
_INT32 = [0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, -(2**31), 2**24]
_INT16 = [0, 1, -1, 0x7F, 0x7FFF, -(2**15)]


@dataclass
class FuzzReport:
    frames: int = 0
    answered: int = 0  # the sentinel came back: the frame was answered or ignored
    closed: int = 0  # the gateway closed the connection (a protocol violation)
    hangs: list[bytes] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    unexpected: int = 0  # requests a handler failed on (UNKNOWN_SERVER_ERROR or an unencodable answer)

    def line(self) -> str:
        return (f"{self.frames} frames: {self.answered} answered, {self.closed} connections closed, "
                f"{len(self.hangs)} hangs, {self.unexpected} unexpected handler errors, "
                f"peak RSS {self.peak_rss_mib:.0f} MiB")


class RecordingProxy:
    """A TCP proxy in front of the gateway that keeps every request frame clients send."""

    def __init__(self, target_port: int = 0) -> None:
        self.target_port = target_port  # may be set once the gateway listens
        self.frames: list[bytes] = []
        self.port = 0

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._serve, listeners, task_status=task_status)

    async def _serve(self, client: trio.SocketStream) -> None:
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            await client.aclose()
            return
        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, upstream, True, nursery.cancel_scope)
            nursery.start_soon(self._pump, upstream, client, False, nursery.cancel_scope)

    async def _pump(self, source, sink, record: bool, scope: trio.CancelScope) -> None:
        decoder = FrameDecoder(2**31 - 1)
        try:
            while data := await source.receive_some(65536):
                if record:
                    decoder.feed(data)
                    while (frame := decoder.next_frame()) is not None:
                        self.frames.append(frame)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


def mutate(frame: bytes, rng: random.Random) -> bytes:
    """One hostile variant of a request frame (without its size prefix)."""
    data = bytearray(frame)
    kind = rng.randrange(7)
    if kind == 0 and data:  # flip a few bits
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1 and len(data) >= 12:  # an extreme int32 where a length or count may be
        position = rng.randrange(8, len(data) - 3)
        struct.pack_into(">i", data, position, rng.choice(_INT32))
    elif kind == 2 and len(data) >= 10:  # an extreme int16 (string lengths, versions)
        position = rng.randrange(8, len(data) - 1)
        struct.pack_into(">h", data, position, rng.choice(_INT16))
    elif kind == 3:  # truncated
        del data[rng.randrange(len(data) + 1):]
    elif kind == 4 and len(data) >= 4:  # another version of the same API
        struct.pack_into(">h", data, 2, rng.randrange(-1, 20))
    elif kind == 5 and data:  # a slice replaced by random bytes
        start = rng.randrange(len(data))
        end = min(len(data), start + rng.randint(1, 32))
        data[start:end] = rng.randbytes(rng.randint(0, 64))
    else:  # garbage appended
        data += rng.randbytes(rng.randint(1, 64))
    return bytes(data)


def generated_frames(count: int, seed: int) -> list[bytes]:
    """Well-formed requests with random contents, drawn from kio's schemas for every
    (api key, version) the gateway serves (Produce v0-2, advertised but refused, have no schema)."""
    served = [(int(key), version) for key, handler in sorted(REGISTRY.items())
              for version in range(handler.served.min_version, handler.served.max_version + 1)]
    frames: list[bytes] = []
    st.register_type_strategy(Records, st.binary(max_size=256).map(Records))

    @settings(max_examples=count, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def draw(data) -> None:
        api_key, version = data.draw(st.sampled_from(served))
        body = data.draw(st.from_type(request_class(api_key, version)))
        try:
            frames.append(encode_request(RequestHeader(api_key, version, 1, "fuzz"), body))
        except (ValueError, OverflowError, struct.error):
            pass  # values kio's own writer cannot encode (out-of-range durations)

    random.seed(seed)
    draw()
    return frames[:count]


def _rss_mib() -> float:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _one(port: int, frame: bytes, deadline_s: float, report: FuzzReport) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder(2**31 - 1)
    try:
        with trio.move_on_after(deadline_s) as scope:
            try:
                await stream.send_all(encode_frame(frame) + _SENTINEL)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # closed while we were still sending: read what is left
            while True:
                try:
                    data = await stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    report.closed += 1
                    return
                decoder.feed(data)
                while (answer := decoder.next_frame()) is not None:
                    if struct.unpack_from(">i", answer)[0] == _SENTINEL_ID:
                        report.answered += 1
                        return
        if scope.cancelled_caught:
            report.hangs.append(frame)
    finally:
        await trio.aclose_forcefully(stream)


async def fuzz(port: int, frames: list[bytes], *, parallel: int = 64, deadline_s: float = 10.0,
               report: FuzzReport | None = None) -> FuzzReport:
    """Send each frame on its own connection, ``parallel`` at a time."""
    report = report or FuzzReport()
    limiter = trio.CapacityLimiter(parallel)

    async def run(frame: bytes) -> None:
        async with limiter:
            await _one(port, frame, deadline_s, report)
            report.frames += 1
            report.peak_rss_mib = max(report.peak_rss_mib, _rss_mib())

    async with trio.open_nursery() as nursery:
        for frame in frames:
            await limiter.acquire()  # do not open every connection at once
            limiter.release()
            nursery.start_soon(run, frame)
    return report


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
        raise AssertionError("the message produced after fuzzing was not read back")
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
