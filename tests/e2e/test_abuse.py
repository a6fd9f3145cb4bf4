"""Abuse, against a real gateway process: clients that never read, huge pipelined fetches,
unfinished frames and budget hogs that vanish, all at once. The gateway's resident memory
stays within its configured bounds plus a stated margin, and a normal producer keeps
getting acknowledgements throughout."""

import os
import socket
import struct
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devkit.wire_client import fetch, produce
from kafscale.protocol import build_batch, encode_frame
from kafscale.protocol.messages import RequestHeader, encode_request
from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_reading import read_to_end

MIB = 2**20
INFLIGHT = 64 * MIB
CACHE = 32 * MIB
# Python's own overhead beyond the byte counts: the encoded copy of one answer while it is
# built, allocator slack, the answers each fetch may overshoot by one batch.
MARGIN = 96 * MIB
# Compaction builds one segment (segment.bytes, 64 MiB by default) at a time, in one buffer.
COMPACTION = 64 * MIB


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _frame(api_key, version, body, correlation_id=1) -> bytes:
    return encode_frame(encode_request(RequestHeader(api_key, version, correlation_id, "abuse"), body))


def _connect(gateway) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read
    return sock


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # the gateway closed us: that is its right


def _never_reads(gateway, stop: threading.Event) -> None:
    sock = _connect(gateway)
    huge = _frame(1, 12, fetch("abuse", 0, 100, max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1))
    for _ in range(64):
        if stop.is_set():
            break
        _send_quietly(sock, huge)
    stop.wait()
    sock.close()


def _unfinished_frame(gateway, stop: threading.Event) -> None:
    sock = _connect(gateway)
    _send_quietly(sock, struct.pack(">i", 90 * MIB) + b"\x00" * (2 * MIB))
    stop.wait()
    sock.close()


def _hog_that_vanishes(gateway, stop: threading.Event) -> None:
    while not stop.is_set():
        sock = _connect(gateway)
        sock.settimeout(2)
        _send_quietly(sock, _frame(1, 12, fetch("abuse", 0, 100, max_bytes=50 * MIB, partition_max_bytes=50 * MIB)))
        big = _frame(0, 9, produce("abuse-hog", build_batch([(None, b"y" * 500_000)])))
        for _ in range(40):
            try:
                sock.sendall(big)
            except OSError:
                break  # blocked by the gateway's backpressure, then timed out
        sock.close()
        stop.wait(0.5)


def test_memory_stays_bounded_and_a_normal_client_is_served(tmp_path):
    gateway = GatewayProcess(
        tmp_path / "data", "--max-inflight-bytes", str(INFLIGHT), "--connection-inflight-bytes", str(16 * MIB),
        "--cache-bytes", str(CACHE), "--connection-stall-ms", "3000",
    ).start()
    try:
        filler = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 20})
        for _ in range(45):
            filler.produce("abuse", value=b"x" * 900_000)
        assert filler.flush(30) == 0
        time.sleep(1)
        baseline = _rss(gateway.process.pid)

        stop = threading.Event()
        hogs = [threading.Thread(target=_never_reads, args=(gateway, stop)) for _ in range(8)]
        hogs += [threading.Thread(target=_unfinished_frame, args=(gateway, stop)) for _ in range(10)]
        hogs += [threading.Thread(target=_hog_that_vanishes, args=(gateway, stop)) for _ in range(3)]
        for hog in hogs:
            hog.start()

        peak = baseline

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _rss(gateway.process.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "message.timeout.ms": 10_000})
        latencies = []
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            started = time.monotonic()
            delivered = []
            producer.produce("normal", value=b"hello", on_delivery=lambda err, msg, delivered=delivered: delivered.append(err))
            producer.flush(10)
            assert delivered == [None], f"a normal produce failed under abuse: {delivered}"
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
        stop.set()
        for thread in [*hogs, sampler]:
            thread.join(30)

        bound = baseline + INFLIGHT + CACHE + COMPACTION + MARGIN
        print(f"abuse: RSS baseline {baseline / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, bound {bound / MIB:.0f} MiB; "
              f"{len(latencies)} normal produces, slowest {max(latencies) * 1000:.0f} ms")
        assert peak <= bound
        assert max(latencies) < 5
        time.sleep(4)  # the stalled connections are closed by now
        assert "kafscale_inflight_request_bytes 0.0" in gateway.metrics()
    finally:
        gateway.kill()


def test_a_batch_larger_than_a_connections_share_is_still_served(tmp_path):
    """A topic whose max.message.bytes is above connection_inflight_bytes: its consumer's
    fetch is served alone from the large-answer budget (it once got empty answers forever)."""
    gateway = GatewayProcess(tmp_path / "data", "--connection-inflight-bytes", str(4 * MIB)).start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("large", 1, 1, config={"max.message.bytes": str(12 * MIB)})])["large"].result(30)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "message.max.bytes": 12 * MIB})
        value = os.urandom(9 * MIB)
        producer.produce("large", value=value)
        assert producer.flush(30) == 0
        (message,) = read_to_end(gateway.bootstrap, "large", 1, timeout_s=30)
        assert message.value() == value
    finally:
        gateway.stop()
