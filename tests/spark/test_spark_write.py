"""df.write / writeStream.format("kafscale"): rows produced through a gateway reach Kafka
consumers exactly as written (keys, values, headers, partitions, topics); a killed task and
a replayed micro-batch duplicate rows at least once and never exactly once."""

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafscale.kafka_client.partitioner import partition_for_key
from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_reading import read_to_end
from tests.support.spark import spark_session

pyspark = pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")


@pytest.fixture(scope="module")
def spark():
    # A killed task is retried (local[2,3]) in a worker forked afresh: a reused idle worker that
    # the kill also hit could be handed to the retry before the daemon reaped it, failing it too.
    yield from spark_session("kafscale-write-tests", master="local[2,3]", **{"spark.python.worker.reuse": "false"})


@pytest.fixture
def gateway(tmp_path):
    running = GatewayProcess(tmp_path / "data").start()
    yield running
    running.kill()


def _topics(gateway, **partitions):
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    for future in admin.create_topics([NewTopic(n, p, 1) for n, p in partitions.items()]).values():
        future.result(10)


def _sink(frame, gateway, **options):
    return frame.write.format("kafscale").mode("append").option("kafka.bootstrap.servers", gateway.bootstrap) \
        .options(**options)


def test_read_transform_write_reaches_consumers_as_written(spark, gateway, tmp_path):
    _topics(gateway, orders=3, shipped=4, audit=2)
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(300):
        producer.produce("orders", key=f"customer-{i % 17}", value=f"order-{i}", headers=[("source", b"web")])
    assert producer.flush(10) == 0

    orders = spark.read.format("kafscale").option("subscribe", "orders").option("includeHeaders", "true") \
        .load(str(tmp_path / "data"))
    shipped = orders.selectExpr(
        "key", "upper(CAST(value AS STRING)) AS value",
        "CASE WHEN offset % 10 = 0 THEN 'audit' ELSE 'shipped' END AS topic",
        "CASE WHEN offset % 10 = 0 THEN 1 ELSE NULL END AS partition",
        "array_union(headers, array(named_struct('key', 'stage', 'value', CAST('shipped' AS BINARY)))) AS headers",
        "offset AS ignored_column")
    _sink(shipped, gateway).save()

    messages = read_to_end(gateway.bootstrap, "shipped", 4) + read_to_end(gateway.bootstrap, "audit", 2)
    assert len(messages) == 300
    by_value = {m.value().decode(): m for m in messages}
    assert sorted(by_value) == sorted(f"ORDER-{i}" for i in range(300))
    for i in range(300):
        message = by_value[f"ORDER-{i}"]
        assert message.key() == f"customer-{i % 17}".encode()
        assert message.headers() == [("source", b"web"), ("stage", b"shipped")]
        if message.topic() == "shipped":  # keyed rows land where Kafka's default partitioner puts them
            assert message.partition() == partition_for_key(message.key(), 4)
        else:
            assert message.partition() == 1
    assert sum(m.topic() == "audit" for m in messages) == orders.where("offset % 10 = 0").count()

    # Without headers and to one topic, rows are encoded in C a partition at a time: values may
    # be null (tombstones), keys absent (the sticky partitioner), partitions given or not.
    rows = [("gone", None, None)] * 5 + [(None, b"x", None)] * 40 + [(f"k{i}", b"y", i % 2 or None) for i in range(50)]
    bulk = spark.createDataFrame(rows, "key string, value binary, partition int")
    _sink(bulk, gateway, topic="shipped").save()
    after = read_to_end(gateway.bootstrap, "shipped", 4)
    gone = [m for m in after if m.key() == b"gone"]
    assert len(gone) == 5 and all(m.value() is None and m.partition() == partition_for_key(b"gone", 4) for m in gone)
    assert sum(m.key() is None and m.value() == b"x" for m in after) == 40
    placed = {m.key(): m.partition() for m in after if m.value() == b"y"}
    assert placed == {f"k{i}".encode(): 1 if i % 2 else partition_for_key(f"k{i}".encode(), 4) for i in range(50)}


def test_bad_writes_are_refused_by_name(spark, gateway):
    _topics(gateway, target=1)
    frame = spark.createDataFrame([("a", 1)], "key string, value int")
    with pytest.raises(Exception, match="column value must be string or binary"):
        _sink(frame, gateway, topic="target").save()
    frame = spark.createDataFrame([("a", "b")], "key string, value string")
    with pytest.raises(Exception, match="give the topic option or a topic column"):
        _sink(frame, gateway).save()
    with pytest.raises(Exception, match="needs transactionalIdPrefix"):
        _sink(frame, gateway, topic="target", delivery="exactly_once").save()
    with pytest.raises(Exception, match="kafka.acks"):
        _sink(frame, gateway, topic="target", **{"kafka.acks": "1"}).save()
    with pytest.raises(Exception, match="overwrite is not supported"):
        frame.write.format("kafscale").mode("overwrite").option("kafka.bootstrap.servers", gateway.bootstrap) \
            .option("topic", "target").save()
    with pytest.raises(Exception, match="invalid_topic_exception"):
        _sink(frame, gateway, topic="no/such topic").save()
    assert read_to_end(gateway.bootstrap, "target", 1, "read_uncommitted") == []
    _sink(frame, gateway, topic="made-on-first-use").save()  # as Kafka producers: the gateway creates it
    assert [m.value() for m in read_to_end(gateway.bootstrap, "made-on-first-use", 1)] == [b"b"]


def _values(messages):
    return sorted(int(m.value()) for m in messages)


def _kill_python_workers() -> int:
    """SIGKILL Spark's forked Python workers (children of the pyspark daemon), as a lost
    executor would lose them: their tasks fail mid-write and are retried."""
    commands = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline, open(f"/proc/{entry}/stat") as stat:
                    commands[int(entry)] = (cmdline.read(), int(stat.read().rsplit(")", 1)[1].split()[1]))
            except OSError:
                continue
    daemons = {pid for pid, (cmdline, _) in commands.items() if b"pyspark.daemon" in cmdline}
    workers = [pid for pid, (_, parent) in commands.items() if parent in daemons and pid in daemons]
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    return len(workers)


def _count(bootstrap, topic, partitions):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "isolation.level": "read_uncommitted"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), 5)[1] for p in range(partitions)]
    finally:
        consumer.close()
    return sum(ends)


@pytest.mark.parametrize("mode", ["batch", "stream"])
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_killed_task_is_retried_and_exactly_once_never_duplicates(spark, gateway, tmp_path, delivery, mode):
    _topics(gateway, results=2, numbers=2)
    rows = 200_000
    options = {"topic": "results", "delivery": delivery, "transactionalIdPrefix": f"kill-{delivery}-{mode}",
               "kafka.batch.size": "1000"}  # small batches: the tasks take seconds, produced as they go
    killed = []

    def kill_mid_way() -> None:  # beside the write, which Spark runs in this thread
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _count(gateway.bootstrap, "results", 2) >= rows // 10:  # the tasks are mid-way
                killed.append(_kill_python_workers())
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_mid_way)
    if mode == "batch":
        killer.start()
        _sink(spark.range(0, rows, numPartitions=2).selectExpr("CAST(id AS STRING) AS value"), gateway,
              **options).save()
    else:
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 20,
                             "queue.buffering.max.messages": rows})
        for i in range(rows):
            producer.produce("numbers", value=str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0
        stream = spark.readStream.format("kafscale").option("subscribe", "numbers").load(str(gateway.data_dir))
        killer.start()
        query = (stream.select("value").writeStream.format("kafscale")
                 .option("kafka.bootstrap.servers", gateway.bootstrap).options(**options)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
    killer.join()
    assert killed and killed[0] > 0

    committed = _values(read_to_end(gateway.bootstrap, "results", 2))
    everything = _values(read_to_end(gateway.bootstrap, "results", 2, "read_uncommitted"))
    assert set(committed) == set(range(rows))
    assert len(everything) > rows, "the killed attempts had produced rows"
    if delivery == "exactly_once":
        assert committed == list(range(rows))  # the killed attempts' transactions were aborted
    else:
        assert len(committed) > rows  # at least once: the retries wrote their rows again


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_a_replayed_micro_batch_is_written_once_exactly_once(spark, gateway, tmp_path, delivery):
    """The driver committed the sink's transactions, then died before Spark recorded the
    micro-batch as done (its commit file is missing): the restarted query runs it again."""
    _topics(gateway, events=2, copies=3)
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(500):
        producer.produce("events", key=str(i % 7), value=str(i))
    assert producer.flush(10) == 0
    checkpoint = tmp_path / f"checkpoint-{delivery}"

    def run() -> None:
        stream = spark.readStream.format("kafscale").option("subscribe", "events").load(str(tmp_path / "data"))
        query = (stream.selectExpr("key", "value").writeStream.format("kafscale")
                 .option("kafka.bootstrap.servers", gateway.bootstrap).option("topic", "copies")
                 .option("delivery", delivery)  # exactly once: ids derive from the checkpoint location
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None

    run()
    assert _values(read_to_end(gateway.bootstrap, "copies", 3)) == list(range(500))
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: p.name)
    assert [p.name for p in commits if not p.name.startswith(".")] == ["0"]
    for path in commits:  # the driver "died" after the sink's commit, before Spark's
        path.unlink()
    run()

    copies = _values(read_to_end(gateway.bootstrap, "copies", 3))
    if delivery == "exactly_once":
        assert copies == list(range(500))
    else:
        assert copies == sorted(list(range(500)) * 2)  # the replay really happened
