"""CPU per Produce request, beside Tansu, in one run: what a small request costs the broker
(the loads and what is counted: ``NOTES``), and callgrind's instructions per request, which
do not move with the machine as CPU time does."""

from __future__ import annotations

import glob
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import trio

from devkit.ports import free_port
from kafscale.storage_backends import LocalBackend, Pieces

from . import baseline, report
from .broker_bench import Broker, _load, tansu_binary
from .wide_bench import _drive, _request

NOTES = (
    "Loads: confluent-kafka in its own process, acks=all, 100 B messages, each a Produce request of its "
    "own: 1,000 msgs/s to one partition with linger.ms 0 for 10 s (bench.load latency), and 2,400 msgs/s "
    "spread over 120 partitions with librdkafka's defaults (linger.ms 5) for 15 s (bench.load steady; "
    "librdkafka puts one partition in a request). Brokers: Kafscale on memory:// and on the filesystem "
    "(its default: linger 0, one fsync'd log object per flush), the commit before "
    "(KAFSCALE_BENCH_BASELINE) the same way, and Tansu 0.6 in memory; a fresh process per load, in "
    "alternating rounds (this VM's CPU time moves ±30 % between rounds). CPU = user and system seconds of"
    " the broker's processes during the load, less its idle rate, per message. The filesystem store alone: "
    "what writing a log object of the size the filesystem rows wrote costs by itself (user and system µs, "
    "3,000 objects, one round each). Instructions per request do not move with the machine: callgrind "
    "counts the gateway's (every thread, linger 0, on memory and on the filesystem) over 1,000 one-record "
    "Produce v9 requests sent one at a time by a raw client, after 300 to warm up.")

AFTERWORD = """\
**Where a small request's instructions went** (callgrind as in the last rows, one commit after \
another, 2026-11-29): 4ab256d 1,088k per request; no cancel scope for a Produce's admission (the \
handler bounds only what it awaits, usually nothing) and one for the log writer's life, not one per \
object: 985k; the reader's waits for the client held to the idle and stall limits by a watchdog task \
instead of a cancel scope per wait: 931k; the socket's descriptor and the socket to ACK taken once: \
927k; writes to memory:// not a schedule point: 831k (one trip through trio's scheduler, an epoll \
pass and the resumption of each waiting task's chain of coroutines, costs about 93k instructions, \
more than decoding the request); the answer sent by the log writer's task as the flush completes \
instead of waking the connection's writer task: 745k. What is left is spread thin: decoding and \
the Produce handler, the log object per flush (a request of its own at linger 0), the answer's \
encoding, trio's two remaining passes per request, and metrics.

**The filesystem** (every thread counted): cfda389 1,133k instructions per request; the log object \
written without a name (O_TMPFILE) and linked in, the directory opened once, instead of a temporary \
name made, linked and removed: 1,099k (the store alone, in a loop: 451 -> 344 µs per object); the \
log writer's objects handed to one long-lived thread of its own that wakes the writer through a pipe, \
one scheduler pass per object, where a trio worker thread took three (the limiter's checkpoint, \
trio's queue of calls from threads, then the task): 897k. In CPU time the gain shows only where \
every request is an object of its own: a raw client sending one request at a time (5,000 at up to \
1,000/s; `perf stat --per-thread` on the gateway) measured the event loop's thread at 1,030 µs and \
the writing thread at 508 µs per request, against 1,403 and 768 µs at cfda389 (total 1,540 against \
2,170 µs; memory:// 620 µs in one thread). librdkafka's requests overlap their fsyncs (up to 5 in \
flight), so one object carries several and the table's rows show no change (755 against 740 µs). \
What the filesystem adds to a request is mostly the kernel's and the handoff between threads: the \
store alone charges 233-266 µs per 514 B object (158-193 µs of it system time: file creation, two \
fsyncs, the link), and each handoff to and from the writing thread is a futex or pipe wake-up of a \
thread on the other core (6.6 context switches per object in the writing thread). On this VM the same \
work costs more CPU time the longer the gateway idles between requests (caches and the core gone \
cold): memory:// with the raw client at 1,000, 350 and 100 requests/s took 616, 986 and 1,478 µs per \
request, so a filesystem request, which waits about 2.5 ms for its fsyncs, pays that as well; the \
instruction counts are the measure of the code."""

ROUNDS = 2
LOADS = (("1,000 msgs/s, 1 partition, linger 0", ("latency", 1000, 10)),
         ("2,400 msgs/s, 120 partitions, linger 5", ("steady", 120, 2400, 15, 100)))
COUNTED, WARM_UP = 1000, 300


def _idle_rate(broker: Broker, seconds: float = 2.0) -> float:
    before = sum(broker.cpu_seconds())
    time.sleep(seconds)
    return (sum(broker.cpu_seconds()) - before) / seconds


def _measure(broker: Broker, load: tuple) -> dict:
    """One load on a fresh broker: its CPU per message (user, system, µs) and the ack latency."""
    with broker:
        time.sleep(1.0)
        idle = _idle_rate(broker)
        mode, *args = load
        user0, system0 = broker.cpu_seconds()
        started = time.monotonic()
        measured = _load(mode, broker.bootstrap, f"requests-{mode}", *args)
        elapsed = time.monotonic() - started
        user1, system1 = broker.cpu_seconds()
    messages = measured.get("samples") or measured["messages"]
    idle_share = idle * elapsed / max(user1 - user0 + system1 - system0, 1e-9)  # the idle CPU, split pro rata
    per = lambda seconds: seconds * (1 - idle_share) / messages * 1e6  # noqa: E731
    return {"messages": messages, "seconds": elapsed, "user_us": per(user1 - user0),
            "system_us": per(system1 - system0), "p50_ms": measured["p50_ms"], "p99_ms": measured["p99_ms"]}


def _instructions(command: list[str], env: dict | None, workdir: Path, store: str) -> float | None:
    """Instructions the gateway executes (every thread of it) per one-record Produce request,
    linger 0, on ``store`` (memory or filesystem)."""
    if shutil.which("valgrind") is None:
        return None
    out = Path(tempfile.mkdtemp(dir=workdir)) / "callgrind.out"
    storage = "memory://" if store == "memory" else str(out.parent / "data")
    port = free_port()
    gateway = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                                *command, "--port", str(port), "--http-port", "-1", "--storage", storage,
                                "--linger-ms", "0", "--log-level", "WARNING"], cwd=out.parent, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        frame = _request("counted", 1)
        deadline = time.monotonic() + 120
        while True:
            try:
                trio.run(_drive, port, frame, WARM_UP, 1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        subprocess.run(["callgrind_control", "-i", "on", str(gateway.pid)], check=True, capture_output=True)
        trio.run(_drive, port, frame, COUNTED, 1)
        subprocess.run(["callgrind_control", "-i", "off", str(gateway.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, capture_output=True)
    finally:
        gateway.terminate()
        gateway.wait()
    totals = [int(line.split()[1]) for path in glob.glob(f"{out}*") for line in open(path)
              if line.startswith("totals:")]
    return max(totals) / COUNTED if totals else None


def _store_alone(workdir: Path, object_bytes: int, count: int = 3000) -> tuple[float, float]:
    """What the filesystem store costs per log object by itself (user, system µs): objects of
    ``object_bytes`` written one after another, fsync'd, as the gateway writes its own."""
    store = LocalBackend(tempfile.mkdtemp(dir=workdir))
    data = Pieces([os.urandom(object_bytes)])
    before = resource.getrusage(resource.RUSAGE_SELF)
    for sequence in range(count):
        store.put_if_absent(f"~log/alone/{sequence:020d}.kfl", data)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ((after.ru_utime - before.ru_utime) / count * 1e6, (after.ru_stime - before.ru_stime) / count * 1e6)


def _object_bytes(root: Path) -> int:
    """The mean size of the log objects under ``root`` (a filesystem store after a load)."""
    sizes = [path.stat().st_size for path in root.rglob("*.kfl") if path.stat().st_size]
    return round(statistics.mean(sizes)) if sizes else 0


def run() -> None:
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        brokers = []
        versions = baseline.versions(report.commit())
        stores: dict[str, Path] = {}  # each Kafscale broker's last filesystem store
        for name, command, env in versions:
            for store in ("memory", "filesystem"):
                def kafscale(name=name, command=command, env=env, store=store) -> Broker:
                    port, http_port = free_port(), free_port()
                    storage = "memory://" if store == "memory" else tempfile.mkdtemp(dir=workdir)
                    stores[f"{name} {store}"] = Path(storage)
                    return Broker(f"{name} {store}", [*command, "--port", str(port), "--http-port", str(http_port),
                                                      "--storage", storage, "--log-level", "WARNING"],
                                  port, workdir, http_port, env)
                brokers.append((f"{name} {store}", kafscale))
        tansu = tansu_binary()
        if tansu is not None:
            def peer(binary: Path = tansu) -> Broker:
                port = free_port()
                url = f"tcp://127.0.0.1:{port}"
                return Broker("tansu", [str(binary), "broker", "--listener-url", url, "--advertised-listener-url",
                                        url], port, workdir)
            brokers.append(("tansu 0.6 memory", peer))
        results: dict[tuple[str, str], list[dict]] = {}
        object_bytes = 0  # a log object of one request, as this commit wrote them on the filesystem
        for round_number in range(ROUNDS):
            for label, load in LOADS:
                for name, make in brokers:
                    measured = _measure(make(), load)
                    if not object_bytes and load == LOADS[0][1] and name == f"{versions[0][0]} filesystem":
                        object_bytes = _object_bytes(stores[name])
                    results.setdefault((name, label), []).append(measured)
                    print(f"round {round_number + 1}: {name}, {label}: {measured['user_us']:.0f} + "
                          f"{measured['system_us']:.0f} µs, ack p99 {measured['p99_ms']:.1f} ms", flush=True)
        for (name, label), runs in results.items():
            total = [r["user_us"] + r["system_us"] for r in runs]
            rows.append([name, label, " / ".join(f"{t:.0f}" for t in total) + f" (median {statistics.median(total):.0f})",
                         "; ".join(f"{r['user_us']:.0f} + {r['system_us']:.0f}" for r in runs),
                         "; ".join(f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f}" for r in runs), ""])
        if object_bytes:
            alone = [_store_alone(workdir, object_bytes) for _ in range(ROUNDS)]
            rows.append(["the filesystem store alone", f"a {object_bytes} B log object written, fsync'd and linked, "
                         "3,000 one after another", " / ".join(f"{u + k:.0f}" for u, k in alone),
                         "; ".join(f"{u:.0f} + {k:.0f}" for u, k in alone), "", ""])
        for name, command, env in versions:
            for store in ("memory", "filesystem"):
                instructions = _instructions(command, env, workdir, store)
                if instructions is not None:
                    rows.append([f"{name} {store}", f"{COUNTED:,} one-record requests one at a time, linger 0 "
                                 "(callgrind)", "", "", "", f"{instructions:,.0f}"])
                    print(f"{name} {store}: {instructions:,.0f} instructions per request", flush=True)
    report.save(
        "22-requests",
        "CPU per Produce request, beside Tansu",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench requests",
        NOTES,
        ["broker", "load", "CPU µs per request, each round", "user + system µs", "ack p50 / p99 ms",
         "instructions per request"],
        rows, afterword=AFTERWORD)
