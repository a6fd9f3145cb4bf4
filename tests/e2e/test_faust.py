"""A real stream-processing framework on Kafscale: Faust (faust-streaming) creates its
table's compacted changelog topic, the gateway cleans it, and a second run of the app,
with no local state, restores the table from the cleaned changelog and ends with
exactly the right counts."""

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.gateway_process import GatewayProcess

APP = Path(__file__).resolve().parent.parent / "apps" / "faust_wordcount.py"


def _run_app(gateway, out: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as sink:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, str(APP), "worker", "-l", "info"], cwd=out.parent,
                                env={**os.environ, "BOOTSTRAP": gateway.bootstrap, "OUT": str(out)},
                                stdout=sink, stderr=subprocess.STDOUT)


def _feed(gateway, words: list[str], marker: str) -> None:
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    for word in [*words, marker]:
        producer.produce("words", value=word.encode())
    assert producer.flush(20) == 0


def _wait(condition, timeout, what, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout} s; app log:\n{log.read_text(errors='replace')[-4000:]}")


def feeding(producer, condition):
    """``condition``, checked while the Faust worker is given more words to count."""
    rng = random.Random(7)

    def check() -> bool:
        for _ in range(20):
            producer.produce("eos-words", value=f"w{rng.randrange(30)}".encode())
        producer.poll(0)
        return condition()
    return check


def test_a_faust_table_restores_from_its_cleaned_changelog(tmp_path):
    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "300", "--cleaner-backoff-ms",
                             "300").start()
    rng = random.Random(5)
    first = [f"w{rng.randrange(20)}" for _ in range(400)]
    second = [f"w{rng.randrange(25)}" for _ in range(300)]
    log = tmp_path / "faust.log"
    app = None
    try:
        out1, out2 = tmp_path / "run1.json", tmp_path / "run2.json"
        app = _run_app(gateway, out1, log)
        _wait(lambda: "Worker ready" in log.read_text(errors="replace"), 60, "the first run ready", log)
        _feed(gateway, first, "__done__1")
        _wait(out1.exists, 60, "the first run's table", log)
        assert json.loads(out1.read_text()) == collections.Counter(first)
        app.send_signal(signal.SIGTERM)  # a clean stop: offsets committed, changelog flushed
        assert app.wait(60) is not None
        app = None

        # The changelog is a compacted topic, and the cleaner cleans it before the restore.
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        resource = ConfigResource("topic", "wordcount-counts-changelog")
        assert admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value == "compact"
        _wait(lambda: gateway.metric("kafscale_cleaner_records_removed") >= len(first) - 20, 60,
              "the changelog cleaned", log)

        log.write_text("")
        app = _run_app(gateway, out2, log)  # memory:// store: nothing local, all from the changelog
        _wait(lambda: "Worker ready" in log.read_text(errors="replace"), 60, "the second run ready", log)
        assert "Restore complete" in log.read_text(errors="replace")
        _feed(gateway, second, "__done__2")
        _wait(out2.exists, 60, "the second run's table", log)
        assert json.loads(out2.read_text()) == collections.Counter(first + second)
    finally:
        if app is not None:
            app.kill()
            app.wait()
        gateway.kill()


EOS_APP = Path(__file__).resolve().parent.parent / "apps" / "faust_eos.py"


def test_faust_exactly_once_mode_runs_on_transactions_and_a_killed_workers_transaction_is_aborted(tmp_path):
    """Faust with processing_guarantee="exactly_once": one transactional producer per source
    partition, its table changelog written in transactions, restored under read_committed.
    A worker killed -9 mid-stream leaves a transaction open; the restarted worker's producer
    fences it, the gateway aborts it, and nothing of it is read back by the restore."""
    from confluent_kafka import Consumer, TopicPartition

    from kafscale.protocol.transactions import PartitionTransactions

    gateway = GatewayProcess(tmp_path / "data").start()
    log = tmp_path / "faust.log"
    out = tmp_path / "eos.json"
    rng = random.Random(3)
    words = [f"w{rng.randrange(30)}" for _ in range(2000)]
    app = None

    def run() -> subprocess.Popen:
        with open(log, "ab") as sink:
            return subprocess.Popen([sys.executable, str(EOS_APP), "worker", "-l", "info"], cwd=tmp_path,
                                    env={**os.environ, "BOOTSTRAP": gateway.bootstrap, "OUT": str(out)},
                                    stdout=sink, stderr=subprocess.STDOUT)

    changelog = "eoscount-eos-counts-changelog"
    state = tmp_path / "data" / "kafscale" / changelog / "0" / "transactions.json"
    # The aborted spans the changelog's state names, as they appear: once the cleaner has
    # removed an aborted transaction's records it drops the span too.
    aborted: set = set()

    def noting_aborts(condition):
        def check() -> bool:
            if state.exists():
                aborted.update(PartitionTransactions.decode(state.read_bytes()).aborted)
            return condition()
        return check

    try:
        app = run()
        _wait(lambda: "Worker ready" in log.read_text(errors="replace"), 60, "the first run ready", log)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
        for word in words:
            producer.produce("eos-words", value=word.encode())
        assert producer.flush(20) == 0
        _wait(lambda: state.exists() and PartitionTransactions.decode(state.read_bytes()).end > 300, 60,
              "transactions committed by the first run", log)
        # Kill the worker while a transaction of its has changelog records stored. Faust's
        # buffered changelog writes can trail its processing, so the worker is kept busy with
        # more words and killed only once the changelog's state shows an open transaction; a
        # kill that lands between two transactions is retried on a restarted worker.
        for attempt in range(5):
            _wait(feeding(producer, lambda: bool(PartitionTransactions.decode(state.read_bytes()).open)), 60,
                  "a transaction open in the changelog", log)
            app.kill()
            app.wait()
            app = run()
            if PartitionTransactions.decode(state.read_bytes()).open:
                break
            _wait(lambda runs=attempt + 2: log.read_text(errors="replace").count("Worker ready") >= runs, 60,
                  "a restarted worker ready", log)
        else:
            raise AssertionError("no kill of five left a transaction open")
        _wait(noting_aborts(lambda: "Worker ready" in log.read_text(errors="replace")), 90, "the second run ready",
              log)
        producer.produce("eos-words", value=b"__done__")
        assert producer.flush(20) == 0
        _wait(noting_aborts(out.exists), 90, "the second run's table", log)
        assert "Restore complete" in log.read_text(errors="replace")
        table = json.loads(out.read_text())
        assert set(table) <= {f"w{i}" for i in range(30)} and sum(table.values()) > 0

        noting_aborts(lambda: True)()
        assert aborted, "the killed worker's transaction was aborted"
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "check",
                             "isolation.level": "read_committed", "enable.partition.eof": True})
        consumer.assign([TopicPartition(changelog, 0, 0)])
        offsets = []
        while True:
            message = consumer.poll(5)
            if message is None or message.error():
                break
            offsets.append(message.offset())
        consumer.close()
        assert offsets and not [o for o in offsets if any(a.first_offset <= o <= a.last_offset for a in aborted)]
    finally:
        if app is not None:
            app.kill()
            app.wait()
        gateway.kill()
