"""Transactions across a cluster: a transaction's partitions are owned by different
gateways, each writes its own markers. While a producer commits and aborts transactions
that span every partition, the transaction coordinator is killed -9, a partition owner is
killed -9, and the coordinator is paused past its lease, twice over; afterwards every
transaction is wholly visible or wholly invisible, as its client was told, to
read_committed consumers and to Spark reading the bucket."""

import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafscale.gateway.groups.store import slot_of
from tests.cluster.conftest import LEASE_MS, wait_until
from tests.support.spark import spark_session

PARTITIONS = 6
TRANSACTIONAL_ID = "ledger-writer"


class LedgerWriter:
    """Transactions of one record per partition ("n:p"); every fourth is aborted. Records
    what the client was told of each: commit, abort, or unknown (a failure mid-way)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.outcomes: dict[int, str] = {}
        self.stop = threading.Event()
        self.failures: list[str] = []

    def _producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TRANSACTIONAL_ID,
                             "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000})
        producer.init_transactions(60)
        return producer

    def run(self) -> None:
        producer = self._producer()
        n = 0
        while not self.stop.is_set():
            n += 1
            self.outcomes[n] = "unknown"
            try:
                producer.begin_transaction()
                for p in range(PARTITIONS):
                    producer.produce("ledger", value=f"{n}:{p}".encode(), partition=p)
                if n % 4 == 0:
                    producer.flush(30)
                    producer.abort_transaction(30)
                    self.outcomes[n] = "abort"
                else:
                    producer.commit_transaction(30)
                    self.outcomes[n] = "commit"
            except KafkaException as exc:
                self.failures.append(str(exc))
                error = exc.args[0]
                try:
                    if error.txn_requires_abort():
                        producer.abort_transaction(30)
                        self.outcomes[n] = "abort"
                        continue
                except KafkaException as again:
                    self.failures.append(str(again))
                # fatal, or the abort failed: a new producer of the id fences this one and
                # finishes whatever it left (the outcome stays unknown)
                while not self.stop.is_set():
                    try:
                        producer = self._producer()
                        break
                    except KafkaException as init_failed:
                        self.failures.append(str(init_failed))
                        time.sleep(0.5)


def _read(bootstrap: str, isolation: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("ledger", p, 0) for p in range(PARTITIONS)])
    values, ends = [], set()
    deadline = time.monotonic() + 90
    try:
        while len(ends) < PARTITIONS:
            assert time.monotonic() < deadline, f"not read to the end in 90 s ({ends})"
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:
                    ends.add(message.partition())
                    continue
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def _stable_everywhere(bootstrap: str) -> bool:
    """Every partition's last stable offset has reached its high watermark: nothing hangs."""
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        return all(committed.get_watermark_offsets(TopicPartition("ledger", p), 10)[1]
                   == plain.get_watermark_offsets(TopicPartition("ledger", p), 10)[1] for p in range(PARTITIONS))
    except KafkaException:
        return False
    finally:
        committed.close()
        plain.close()


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")
    yield from spark_session("kafscale-cluster-transactions")


def test_every_transaction_is_wholly_committed_or_wholly_aborted_across_kills_and_pauses(cluster, spark):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("ledger", PARTITIONS, 1)])["ledger"].result(15)
    owners = cluster.wait_owned("ledger", PARTITIONS, {0, 1, 2})
    assert len({node for node, _ in owners.values()}) >= 2, "the transaction must span gateways"
    writer = LedgerWriter(cluster.bootstrap)
    thread = threading.Thread(target=writer.run, daemon=True)
    thread.start()

    def committed_so_far() -> int:
        return sum(1 for outcome in list(writer.outcomes.values()) if outcome == "commit")

    def progress(more: int) -> None:
        start = committed_so_far()
        wait_until(lambda: committed_so_far() >= start + more, 90,
                   lambda: f"no progress: {writer.outcomes}, failures {writer.failures[-5:]}")

    def coordinator() -> int:
        return cluster.coordinator_of_slot(slot_of(TRANSACTIONAL_ID, 16), {0, 1, 2})

    try:
        progress(5)
        for _ in range(2):
            victim = cluster.gateways[coordinator()]
            victim.kill()  # the coordinator, mid-way through some transaction
            progress(3)
            victim.start()
            progress(3)
            owner = next(node for node, _ in cluster.owners("ledger").values() if node != coordinator())
            cluster.gateways[owner].kill()  # a partition owner, before some of its markers
            progress(3)
            cluster.gateways[owner].start()
            progress(3)
            paused = cluster.gateways[coordinator()]
            paused.process.send_signal(signal.SIGSTOP)  # past its lease: others take its partitions
            try:
                time.sleep(LEASE_MS / 1000 + 2)
                progress(3)
            finally:
                paused.process.send_signal(signal.SIGCONT)
            progress(3)
    finally:
        writer.stop.set()
        thread.join(120)
    assert not thread.is_alive()

    wait_until(lambda: _stable_everywhere(cluster.bootstrap), 60, "a transaction hangs: LSO below HW")
    committed_values = _read(cluster.bootstrap, "read_committed")
    seen: dict[int, set[int]] = {}
    for value in committed_values:
        n, p = map(int, value.split(b":"))
        assert p not in seen.setdefault(n, set()), f"transaction {n} seen twice on partition {p}"
        seen[n].add(p)
    for n, outcome in writer.outcomes.items():
        partitions = seen.get(n, set())
        assert partitions in (set(), set(range(PARTITIONS))), f"transaction {n} ({outcome}) is partial: {partitions}"
        if outcome == "commit":
            assert partitions, f"transaction {n} was acknowledged committed but is not visible"
        if outcome == "abort":
            assert not partitions, f"transaction {n} was aborted but is visible"
    assert sum(1 for o in writer.outcomes.values() if o == "commit") >= 20
    everything = _read(cluster.bootstrap, "read_uncommitted")
    aborted = [n for n, o in writer.outcomes.items() if o == "abort"]
    assert aborted and any(value.startswith(b"%d:" % aborted[0]) for value in everything)

    # Spark reading the bucket alone sees what the consumers see, in both isolation levels.
    options = cluster.s3.options()

    def frame(isolation: str) -> list[bytes]:
        df = (spark.read.format("kafscale").option("subscribe", "ledger").option("kafka.isolation.level", isolation)
              .option("s3.endpoint", options.endpoint).option("s3.region", options.region)
              .option("s3.accessKeyId", options.access_key_id).option("s3.secretAccessKey", options.secret_access_key)
              .option("s3.pathStyle", "true").option("s3.allowHttp", "true").load(cluster.location))
        return sorted(bytes(r.value) for r in df.select("value").collect())

    assert frame("read_committed") == sorted(committed_values)
    assert frame("read_uncommitted") == sorted(everything)
