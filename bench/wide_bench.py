"""Produce requests that name many partitions (one small batch each), as a producer spread
over many partitions sends them: the gateway's CPU per request and per batch. With
``KAFSCALE_BENCH_BASELINE=<ref>`` an earlier commit's gateway runs the same load, same run."""

from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path

import trio
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records

from devkit.ports import free_port
from kafscale.protocol import build_batch
from kafscale.protocol.framing import FrameDecoder, encode_frame
from kafscale.protocol.messages import RequestHeader, decode_response, encode_request

from . import baseline, report
from .broker_bench import Broker

WIDTHS = (1, 120)
REQUESTS = 5_000
IN_FLIGHT = 16


def _request(topic: str, partitions: int) -> bytes:
    batch = build_batch([(None, b"x" * 100)])
    body = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        TopicProduceData(name=topic, partition_data=tuple(
            PartitionProduceData(index=p, records=Records(batch)) for p in range(partitions))),))
    return encode_request(RequestHeader(0, 9, 0, "bench"), body)


async def _drive(port: int, frame: bytes, count: int, in_flight: int = IN_FLIGHT) -> None:
    """``count`` copies of one Produce request, ``in_flight`` at a time; every answer checked."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    sent = received = 0
    async with stream, trio.open_nursery() as nursery:
        window = trio.Semaphore(in_flight)

        async def receive() -> None:
            nonlocal received
            while received < count:
                while (payload := decoder.next_frame()) is None:
                    data = await stream.receive_some(1 << 16)
                    if not data:
                        raise RuntimeError("the gateway closed the connection")
                    decoder.feed(data)
                _, body = decode_response(0, 9, payload)
                codes = {p.error_code for t in body.responses for p in t.partition_responses}
                if codes != {0}:
                    raise RuntimeError(f"produce failed: {codes}")
                received += 1
                window.release()

        nursery.start_soon(receive)
        while sent < count:
            await window.acquire()
            await stream.send_all(encode_frame(frame))
            sent += 1


def _measure(command: list[str], env: dict[str, str] | None, tmp: Path, name: str) -> list[dict]:
    data = tmp / name
    data.mkdir()
    port = free_port()
    results = []
    with Broker(name, [*command, "--port", str(port), "--http-port", "-1", "--storage", str(data / "data"),
                       "--log-level", "WARNING", "--default-partitions", str(max(WIDTHS))], port, data,
                env=env) as broker:
        for width in WIDTHS:
            frame = _request(f"wide-{width}", width)
            trio.run(_drive, port, frame, 20)  # creates the topic and loads its partitions
            user, system = broker.cpu_seconds()
            started = time.perf_counter()
            trio.run(_drive, port, frame, REQUESTS)
            seconds = time.perf_counter() - started
            user_after, system_after = broker.cpu_seconds()
            cpu = user_after - user + system_after - system
            results.append({"partitions": width, "requests_per_s": REQUESTS / seconds,
                            "cpu_us_per_request": cpu / REQUESTS * 1e6,
                            "cpu_us_per_batch": cpu / (REQUESTS * width) * 1e6})
    return results


def run() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for number, (name, command, env) in enumerate(baseline.versions(report.commit())):
            for result in _measure(command, env, Path(tmp), f"gateway-{number}"):
                rows.append([name, f"{result['partitions']} partitions", f"{result['requests_per_s']:,.0f} requests/s",
                             f"{result['cpu_us_per_request']:,.0f} µs", f"{result['cpu_us_per_batch']:,.1f} µs"])
                print(" | ".join(rows[-1]), flush=True)
    report.save(
        "25-wide-produce",
        "Produce requests naming many partitions: gateway CPU",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench wide",
        f"{REQUESTS:,} Produce v9 requests (acks=all) per width, {IN_FLIGHT} in flight on one connection, each "
        "naming every partition of a topic with one batch of one 100 B record, as a producer spread over many "
        "partitions sends them; filesystem store (fsync on, the default). CPU is the gateway process's (user + "
        "system, from /proc), divided by requests and by batches.",
        ["gateway", "request", "rate", "CPU per request", "CPU per batch"],
        rows,
    )
