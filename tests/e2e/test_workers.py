"""``kafscale-gateway --workers N`` on the filesystem, as a user runs it: one listener, one
broker per worker, partitions spread over them; a worker killed -9 mid-produce loses no
acknowledged record, and the parent starts it again; SIGTERM stops them all; the data
directory keeps its topics and belongs to workers from then on."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess

PRODUCER = r"""
import os, sys, json
from confluent_kafka import Producer
bootstrap, out_path = sys.argv[1], sys.argv[2]
out = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
def report(err, msg):
    if err is None:
        os.write(out, (json.dumps([msg.partition(), msg.offset(), msg.value().decode()]) + "\n").encode())
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 2, "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000})
i = 0
while True:
    try:
        producer.produce("spread", value=f"m-{i}".encode(), on_delivery=report)
        i += 1
    except BufferError:
        producer.poll(0.01)
    if i % 50 == 0:
        producer.poll(0.001)
"""


def _workers(gateway: GatewayProcess) -> list[int]:
    """The worker processes' pids (the parent's children)."""
    assert gateway.process is not None
    found = subprocess.run(["pgrep", "-P", str(gateway.process.pid)], capture_output=True, text=True).stdout
    return sorted(int(pid) for pid in found.split())


def _wait_for_brokers(admin: AdminClient, count: int, topic: str | None = None, timeout: float = 60) -> dict:
    """Metadata once ``count`` brokers answer and every partition of ``topic`` has a live leader."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=10)
        leaders_live = topic is None or (topic in metadata.topics and all(
            p.leader in metadata.brokers and p.error is None for p in metadata.topics[topic].partitions.values()))
        if len(metadata.brokers) == count and leaders_live:
            return metadata
        assert time.monotonic() < deadline, f"brokers {sorted(metadata.brokers)}, wanted {count}"
        time.sleep(0.2)


def _acked(path: Path) -> list:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1]]


def _stored(bootstrap: str, partitions: int) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition("spread", p), timeout=10)[1] for p in range(partitions)}
    consumer.assign([TopicPartition("spread", p, 0) for p in range(partitions)])
    stored: dict = {}
    while len(stored) < sum(ends.values()):
        message = consumer.poll(10)
        assert message is not None and not message.error(), message and message.error()
        stored[(message.partition(), message.offset())] = message.value().decode()
    consumer.close()
    return stored


def test_workers_share_partitions_and_a_killed_worker_loses_nothing_acknowledged(tmp_path):
    # Leases far longer than the moves measured: a killed worker's partitions move because
    # the parent ends its leases when it sees it exit, not because they ran out.
    gateway = GatewayProcess(tmp_path / "data", "--workers", "2", "--lease-ttl-ms", "30000",
                             "--cluster-refresh-ms", "500").start()
    producer = None
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        _wait_for_brokers(admin, 2)
        admin.create_topics([NewTopic("spread", 6, 1)])["spread"].result(20)
        metadata = _wait_for_brokers(admin, 2, "spread")
        ports = {broker.port for broker in metadata.brokers.values()}
        assert len(ports) == 2 and gateway.port not in ports  # each worker advertises its own port
        assert len({p.leader for p in metadata.topics["spread"].partitions.values()}) == 2  # both lead

        acks = tmp_path / "acks.jsonl"
        producer = subprocess.Popen([sys.executable, "-c", PRODUCER, gateway.bootstrap, str(acks)])
        moved: list[float] = []  # kill -9 to every partition led by a live worker, per round
        for round_ in range(3):
            before = len(_acked(acks))
            deadline = time.monotonic() + 30
            while len(_acked(acks)) < before + 2000:
                assert time.monotonic() < deadline, f"round {round_}: acks stalled at {len(_acked(acks))}"
                time.sleep(0.1)
            victim = _workers(gateway)[round_ % 2]
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while victim in _workers(gateway) or len(_workers(gateway)) < 2:
                assert time.monotonic() < deadline, "the parent did not start the killed worker again"
                time.sleep(0.1)
            _wait_for_brokers(admin, 2, "spread")
            moved.append(time.monotonic() - killed)
        before = len(_acked(acks))
        deadline = time.monotonic() + 60
        while len(_acked(acks)) < before + 2000:  # producing goes on after the last kill
            assert time.monotonic() < deadline, "producing did not resume after the last kill"
            time.sleep(0.1)
        producer.send_signal(signal.SIGKILL)
        producer.wait()
        acked = _acked(acks)
        stored = _stored(gateway.bootstrap, 6)
        missing = [value for partition, offset, value in acked if stored.get((partition, offset)) != value]
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged records are missing, e.g. {missing[:3]}"
        assert len(set(stored.values())) == len(stored)  # idempotence: nothing twice
        assert max(moved) < 20, moved  # far below the 30 s lease
        print(f"{len(acked)} acknowledged, {len(stored)} stored over 3 kills of a worker; "
              f"partitions led again {', '.join(f'{s:.1f}' for s in moved)} s after each kill")
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        gateway.kill()


def test_workers_stop_on_sigterm_keep_their_topics_and_own_their_directory(tmp_path):
    data = tmp_path / "data"
    gateway = GatewayProcess(data, "--workers", "2").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        _wait_for_brokers(admin, 2)
        admin.create_topics([NewTopic("kept", 4, 1)])["kept"].result(20)
        _wait_for_brokers(admin, 2, "kept")

        second = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--workers", "2", "--storage", str(data),
                                 "--port", str(gateway.port + 0), "--http-port", "-1"],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "another kafscale-gateway --workers runs" in second.stderr

        workers = _workers(gateway)
        assert gateway.stop(signal.SIGTERM, timeout=60) == 0
        assert all(not Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived its parent's stop"

        lone = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--storage", str(data), "--port", "0",
                               "--http-port", "-1"], capture_output=True, text=True, timeout=60)
        assert lone.returncode == 1 and "--workers" in lone.stderr  # a lone gateway would seal the workers' logs

        gateway.start()
        metadata = _wait_for_brokers(AdminClient({"bootstrap.servers": gateway.bootstrap}), 2, "kept")
        assert len(metadata.topics["kept"].partitions) == 4
    finally:
        gateway.kill()


def test_a_worker_that_cannot_start_stops_them_all(tmp_path):
    """A port another program holds is the user's to fix: the parent exits with the worker's
    error instead of starting workers again for ever."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--workers", "2",
                                 "--storage", str(tmp_path / "data"), "--port", str(taken), "--http-port", "-1"],
                                capture_output=True, text=True, timeout=90)
    finally:
        holder.close()
    assert result.returncode == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{taken}" in result.stderr and "a worker failed to start" in result.stderr
    assert time.monotonic() - started < 60
    config_error = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--workers", "2", "--port", "0",
                                   "--storage", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert config_error.returncode == 2 and "fixed ports" in config_error.stderr


def test_workers_take_over_a_directory_a_lone_gateway_used(tmp_path):
    """A lone gateway keeps its catalog, groups, offsets, group configs and transactions in
    the store; workers started on its directory take them into their coordination store
    before the first worker starts: the same topics (ids, configs), every record, the
    group's committed offsets and configs, and its transactional id carries on."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    data = tmp_path / "data"
    lone = GatewayProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": lone.bootstrap})
        admin.create_topics([NewTopic("before", 2, 1, config={"retention.ms": "123456789"})])["before"].result(20)
        topic_id = str(admin.describe_topics(_topics("before"))["before"].result(20).topic_id)
        producer = Producer({"bootstrap.servers": lone.bootstrap, "enable.idempotence": True})
        for i in range(1000):
            producer.produce("before", value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        committer = Consumer({"bootstrap.servers": lone.bootstrap, "group.id": "readers"})
        committer.commit(offsets=[TopicPartition("before", 0, 300), TopicPartition("before", 1, 200)],
                         asynchronous=False)
        committer.close()
        group = ConfigResource(ResourceType.GROUP, "readers", incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([group])[group].result(20)
        transactional = Producer({"bootstrap.servers": lone.bootstrap, "transactional.id": "ledger"})
        transactional.init_transactions(30)
        transactional.begin_transaction()
        transactional.produce("before", value=b"in a transaction", partition=0)
        transactional.commit_transaction(30)
    finally:
        assert lone.stop(signal.SIGTERM, timeout=60) == 0

    workers = GatewayProcess(data, "--workers", "2", port=lone.port).start(timeout=60)
    try:
        assert workers.logs().count("took over the state of the gateway that ran alone here") == 1
        admin = AdminClient({"bootstrap.servers": workers.bootstrap})
        _wait_for_brokers(admin, 2, "before")
        assert str(admin.describe_topics(_topics("before"))["before"].result(20).topic_id) == topic_id
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "before")])
        assert next(iter(described.values())).result(20)["retention.ms"].value == "123456789"
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "readers")])
        assert next(iter(described.values())).result(20)["consumer.session.timeout.ms"].value == "50000"

        consumer = Consumer({"bootstrap.servers": workers.bootstrap, "group.id": "readers",
                             "enable.auto.commit": False})
        committed = _committed(consumer, [TopicPartition("before", 0), TopicPartition("before", 1)])
        assert [(c.partition, c.offset) for c in committed] == [(0, 300), (1, 200)]
        consumer.assign([TopicPartition("before", 0, 0), TopicPartition("before", 1, 0)])
        values = set()
        deadline = time.monotonic() + 60
        while len(values) < 1001 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                values.add(message.value())
        consumer.close()
        assert values == {b"%d" % i for i in range(1000)} | {b"in a transaction"}

        transactional = Producer({"bootstrap.servers": workers.bootstrap, "transactional.id": "ledger"})
        transactional.init_transactions(30)  # the id's epoch goes on from the lone gateway's
        transactional.begin_transaction()
        transactional.produce("before", value=b"after", partition=1)
        transactional.commit_transaction(30)
    finally:
        assert workers.stop(signal.SIGTERM, timeout=60) == 0
    # Started again, the workers do not copy anything a second time (one log for both runs).
    workers.start(timeout=60)
    try:
        assert workers.logs().count("took over the state") == 1
        admin = AdminClient({"bootstrap.servers": workers.bootstrap})
        _wait_for_brokers(admin, 2, "before")
        assert str(admin.describe_topics(_topics("before"))["before"].result(20).topic_id) == topic_id
    finally:
        workers.kill()


def _committed(consumer: Consumer, partitions: list, timeout: float = 60) -> list:
    """OffsetFetch, asked again while the group's coordinator moves: the workers share the
    coordinator slots out after they start (librdkafka's committed() does not retry
    NOT_COORDINATOR; an application would)."""
    from confluent_kafka import KafkaError, KafkaException

    moving = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(partitions, timeout=20)
        except KafkaException as exc:
            if exc.args[0].code() not in moving or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _topics(*names: str):
    from confluent_kafka import TopicCollection

    return TopicCollection(list(names))


def _scrape(gateway: GatewayProcess) -> dict[tuple[str, str], float]:
    """/metrics on the workers' shared HTTP port: {(sample name, worker): value} of the
    unlabelled series (within 3 s: a sibling that does not answer must not hold it up)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.http_port}/metrics", timeout=3) as answer:
        text = answer.read().decode()
    return {(sample.name, sample.labels["worker"]): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if set(sample.labels) == {"worker"}}


def _slot(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return argv[argv.index(b"--worker-slot") + 1].decode()


def test_metrics_answer_every_workers_series_whichever_worker_takes_the_scrape(tmp_path):
    """The workers share the HTTP port, so any one of them takes a scrape: each answers every
    worker's series, labelled with its slot, and counters do not jump between scrapes."""
    gateway = GatewayProcess(tmp_path / "data", "--workers", "2").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        _wait_for_brokers(admin, 2)
        admin.create_topics([NewTopic("counted", 4, 1)])["counted"].result(20)
        _wait_for_brokers(admin, 2, "counted")
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(2000):
            producer.produce("counted", value=b"%d" % i, partition=i % 4)
        assert producer.flush(30) == 0

        for _ in range(10):  # new connections: the kernel spreads them over both workers
            scraped = _scrape(gateway)
            assert scraped[("kafscale_worker_up", "0")] == scraped[("kafscale_worker_up", "1")] == 1
            produced = [scraped[("kafscale_produced_records_total", slot)] for slot in ("0", "1")]
            assert sum(produced) == 2000 and all(produced), produced  # both led partitions of "counted"

        killed = _workers(gateway)[0]
        killed_slot, live_slot = _slot(killed), "1" if _slot(killed) == "0" else "0"
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 30
        seen_down = back = False
        while time.monotonic() < deadline and not back:  # the live worker answers for the dead one
            try:
                scraped = _scrape(gateway)
            except (ConnectionError, urllib.error.URLError):  # a connection the killed worker had queued
                continue
            assert scraped[("kafscale_worker_up", live_slot)] == 1
            seen_down = seen_down or scraped[("kafscale_worker_up", killed_slot)] == 0
            back = seen_down and scraped[("kafscale_worker_up", killed_slot)] == 1  # started again
            time.sleep(0.05)
        assert seen_down and back
    finally:
        gateway.kill()


def test_a_damaged_coordination_journal_is_refused_with_a_message_not_a_traceback(tmp_path):
    journal = tmp_path / "data" / ".kafscale-coordination" / "journal"
    journal.parent.mkdir(parents=True)
    journal.write_text("garbage\nmore garbage\n")
    port = GatewayProcess(tmp_path / "data").port
    refused = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--workers", "2", "--storage",
                              str(tmp_path / "data"), "--port", str(port), "--http-port", "-1"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.startswith("kafscale-gateway: the workers' coordination journal is unreadable: "), \
        refused.stderr
    assert "Traceback" not in refused.stderr
