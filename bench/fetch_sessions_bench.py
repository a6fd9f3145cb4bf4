"""What incremental fetch sessions (KIP-227) save a consumer of many partitions.

A consumer caught up on 1,000 partitions of which none has new records fetches again and
again (max_wait 0, so each Fetch is answered at once and the gateway's work is the request's):
without a session every Fetch lists all 1,000 partitions and is answered with all 1,000;
within one it lists none and is answered with none. Measured on the wire: request and answer
bytes per Fetch, and the gateway process's CPU per Fetch (from /proc).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from devkit.wire_client import Client
from kafscale.protocol.entities import build
from kafscale.protocol.messages import RequestHeader, encode_request, request_class

from . import report
from .broker_bench import Broker, kafscale_broker

PARTITIONS = 1000
FETCHES = 400
VERSION = 12


def _fetch(session_id: int, epoch: int, partitions: range):
    return build(request_class(1, VERSION), dict(
        replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[dict(topic="wide", partitions=[dict(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20) for p in partitions])] if partitions else [],
        forgotten_topics_data=[], rack_id=""))


def _size(body) -> int:
    return len(encode_request(RequestHeader(1, VERSION, 1, "bench"), body)) + 4


async def _fetches(client: Client, broker: Broker, body_of) -> tuple[float, float]:
    """Answer bytes and gateway CPU seconds per Fetch, over FETCHES of ``body_of(epoch)``."""
    answer_bytes = 0
    before = sum(broker.cpu_seconds())
    for epoch in range(1, FETCHES + 1):
        await client.send(1, VERSION, body_of(epoch), epoch)
        payload = await client.receive()
        assert payload is not None
        answer_bytes += len(payload) + 4
    return answer_bytes / FETCHES, (sum(broker.cpu_seconds()) - before) / FETCHES


async def _measure(broker: Broker) -> dict[str, tuple[float, float, float]]:
    client = await Client.connect(broker.port)
    created = await client.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name="wide", num_partitions=PARTITIONS, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=30_000, validate_only=False)))
    assert created.topics[0].error_code == 0, created
    full = _fetch(0, -1, range(PARTITIONS))
    sessionless = await _fetches(client, broker, lambda epoch: full)
    opened = await client.call(1, VERSION, _fetch(0, 0, range(PARTITIONS)))
    assert opened.session_id != 0
    nothing = range(0)
    in_session = await _fetches(client, broker, lambda epoch: _fetch(opened.session_id, epoch, nothing))
    return {
        "without a session (every partition listed)": (_size(full), *sessionless),
        "within a session (nothing listed)": (_size(_fetch(opened.session_id, 1, nothing)), *in_session),
    }


def run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = kafscale_broker(Path(tmp))
        with broker:
            results = trio.run(_measure, broker)
    rows = []
    for name, (request_bytes, answer_bytes, cpu) in results.items():
        print(f"{name}: request {request_bytes} B, answer {answer_bytes:.0f} B, gateway CPU {cpu * 1e6:.0f} µs")
        rows.append([name, f"{request_bytes:,} B", f"{answer_bytes:,.0f} B", f"{cpu * 1e6:,.0f} µs"])
    report.save(
        "33-fetch-sessions",
        f"Incremental fetch sessions: a consumer of {PARTITIONS:,} partitions",
        "python -m bench fetch-sessions",
        f"A consumer caught up on {PARTITIONS:,} partitions with nothing new fetches {FETCHES} times with max_wait 0 "
        f"(Fetch v{VERSION}, raw requests from devkit/wire_client.py): without a session, and within one "
        "(KIP-227). Request and answer bytes per Fetch on the wire; gateway CPU per Fetch is the process's "
        "user+system time over the run divided by the fetches (10 ms ticks).",
        ["fetching", "request", "answer", "gateway CPU per Fetch"],
        rows,
    )
