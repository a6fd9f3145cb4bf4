"""What the gateway's limits cost and what hostile input does: an all-topics Metadata
over a catalog at the default partition limit (and whether other requests still get
through meanwhile), and a longer fuzz campaign than CI's."""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time

import trio

from . import report
from .baseline import ROOT


def _probe(port: int, done: threading.Event) -> float:
    """ApiVersions every 5 ms from a blocking socket; returns the slowest answer's seconds."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from kafscale.protocol import encode_frame
    from kafscale.protocol.messages import RequestHeader, encode_request

    frame = encode_frame(encode_request(RequestHeader(18, 3, 1, "probe"), ApiVersionsRequest(
        client_software_name="p", client_software_version="1")))
    slowest = 0.0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while not done.is_set():
            started = time.perf_counter()
            sock.sendall(frame)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            sock.recv(size, socket.MSG_WAITALL)
            slowest = max(slowest, time.perf_counter() - started)
            time.sleep(0.005)
    return slowest


async def _metadata_cost() -> list[list]:
    from devkit.wire_client import Client, config
    from kafscale.gateway.server import serve
    from kafscale.protocol.entities import build
    from kafscale.protocol.messages import request_class

    rows = []
    async with trio.open_nursery() as nursery:
        shutdown = trio.Event()
        running = await nursery.start(serve, config(), shutdown)
        for index in range(running.context.config.topics.max_partitions // 10_000):
            await running.context.logs.create_topic(f"t{index}", 10_000)
        client = await Client.connect(running.port)
        request = build(request_class(3, 12), dict(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        done = threading.Event()
        probe_result: list[float] = []

        async def run_probe() -> None:  # in its own thread, so it sees the event loop stall
            probe_result.append(await trio.to_thread.run_sync(_probe, running.port, done))

        nursery.start_soon(run_probe)
        await trio.sleep(0.2)
        started, cpu = time.perf_counter(), time.process_time()
        body = await client.call(3, 12, request)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        await trio.sleep(0.2)
        done.set()
        while not probe_result:
            await trio.sleep(0.01)
        slowest_probe = probe_result[0]
        partitions = sum(len(topic.partitions) for topic in body.topics)
        rows.append(["all-topics Metadata v12", f"{partitions:,} partitions", f"{wall:.2f} s wall, {cpu:.2f} s CPU "
                     "(decode in the same process included)", f"slowest ApiVersions meanwhile {slowest_probe * 1000:.0f} ms"])
        await client.stream.aclose()
        shutdown.set()
    return rows


async def _fuzz(frames: int) -> list[list]:
    from devkit.fuzz import run_campaign

    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        result = await run_campaign(nursery, mutations=frames * 7 // 10, generated=frames * 3 // 10, seed=4242)
        nursery.cancel_scope.cancel()
    return [["fuzz (mutated real-client frames, generated requests)", f"{result.frames:,} frames",
             f"{result.answered:,} answered, {result.closed:,} closed, {len(result.hangs)} hangs, "
             f"{result.unexpected} unexpected handler errors", f"peak RSS {result.peak_rss_mib:.0f} MiB "
             f"(harness and frames included), {time.perf_counter() - started:.0f} s"]]


def run(fuzz_frames: int = 20_000) -> None:
    sys.path.insert(0, str(ROOT))  # the fuzz harness and wire client live with the tests
    rows = trio.run(_metadata_cost) + trio.run(_fuzz, fuzz_frames)
    for row in rows:
        print(" | ".join(row))
    report.save(
        "15-limits",
        "Limits and hostile input",
        "python -m bench limits",
        "In-process gateway (memory storage). Metadata: a catalog at the default max_partitions "
        "(10 topics of 10,000 partitions), one client asks for every topic while another, in its own "
        "thread, sends ApiVersions every 5 ms; the catalog loops yield every 1,000 partitions and a "
        "large answer is built and encoded in a worker thread (the first client's decode runs in the "
        "same process and holds the GIL too). Fuzz: the CI campaign's harness (devkit/fuzz.py) with more "
        "frames; a hang is a frame that got neither an answer nor a close within 10 s.",
        ["what", "size", "result", "also"],
        rows,
    )
