"""spark.read.format("kafscale") in a real local Spark session, over topics produced through a
running gateway by a real client; the DataFrame must equal what a Kafka consumer reads."""

import os
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess

pyspark = pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors must use this venv
    session = (SparkSession.builder.master("local[2]").appName("kafscale-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """One gateway, one topic per codec (3 partitions), keyed messages with headers."""
    data = tmp_path_factory.mktemp("spark") / "data"
    gateway = GatewayProcess(data).start()
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    for codec in CODECS:
        admin.create_topics([NewTopic(f"sp-{codec}", num_partitions=3, replication_factor=1)])[f"sp-{codec}"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(600):
            producer.produce(f"sp-{codec}", key=None if i % 50 == 0 else f"k{i}".encode(),
                             value=None if i % 77 == 0 else f"value-{i}".encode() * 3,
                             headers=[("n", str(i).encode()), ("empty", None)] if i % 2 else None,
                             timestamp=1_700_000_000_000 + i * 10)
            if i % 200 == 199:
                producer.flush(10)  # several segments per partition
        assert producer.flush(10) == 0
    yield gateway, data
    gateway.kill()


def _consume(gateway, topic):
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    rows = []
    deadline = time.monotonic() + 30
    while len(rows) < 600 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            headers = [(k, v) for k, v in (message.headers() or [])]
            rows.append((message.key(), message.value(), message.topic(), message.partition(), message.offset(),
                         message.timestamp()[1], message.timestamp()[0] - 1, headers))
    consumer.close()
    return sorted(rows, key=lambda r: (r[3], r[4]))


@pytest.mark.parametrize("codec", CODECS)
def test_dataframe_equals_what_a_consumer_reads(spark, produced, codec):
    gateway, data = produced
    topic = f"sp-{codec}"
    df = (spark.read.format("kafscale").option("subscribe", topic).option("includeHeaders", "true").load(str(data)))
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = [
        (r.key and bytes(r.key), r.value and bytes(r.value), r.topic, r.partition, r.offset,
         int(r.timestamp.replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000), r.timestampType,
         [(h.key, h.value and bytes(h.value)) for h in r.headers])
        for r in df.orderBy("partition", "offset").collect()
    ]
    assert rows == _consume(gateway, topic)


def test_offset_ranges_assign_and_pattern(spark, produced):
    _, data = produced
    read = lambda **opts: spark.read.format("kafscale").options(**opts).load(str(data))  # noqa: E731
    ranged = read(subscribe="sp-none", startingOffsets='{"sp-none": {"0": 10, "1": -2}}',
                  endingOffsets='{"sp-none": {"0": 20, "1": 5, "2": -1}}')
    counts = {r.partition: (r.c, r.lo, r.hi) for r in ranged.groupBy("partition").agg(
        __import__("pyspark.sql.functions", fromlist=["count"]).count("*").alias("c"),
        __import__("pyspark.sql.functions", fromlist=["min"]).min("offset").alias("lo"),
        __import__("pyspark.sql.functions", fromlist=["max"]).max("offset").alias("hi")).collect()}
    assert counts[0] == (10, 10, 19) and counts[1] == (5, 0, 4) and counts[2][1] == 0
    assert read(assign='{"sp-gzip": [1]}').select("partition").distinct().collect() == [pyspark.sql.Row(partition=1)]
    topics = {r.topic for r in read(subscribePattern="sp-(lz4|zstd)").select("topic").distinct().collect()}
    assert topics == {"sp-lz4", "sp-zstd"}
    assert read(subscribe="sp-none", startingOffsets="latest").count() == 0


def test_timestamps_and_partition_splitting(spark, produced):
    import datetime

    from pyspark.sql import functions as F

    _, data = produced
    read = lambda **opts: spark.read.format("kafscale").options(subscribe="sp-zstd", **opts).load(str(data))  # noqa: E731
    everything = read()
    key = lambda df: sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())  # noqa: E731
    start_ms, end_ms = 1_700_000_000_000 + 1505, 1_700_000_000_000 + 4005
    as_ts = lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)  # noqa: E731
    assert key(read(startingTimestamp=str(start_ms))) == key(everything.filter(F.col("timestamp") >= as_ts(start_ms)))
    assert key(read(endingTimestamp=str(end_ms))) == key(everything.filter(F.col("timestamp") < as_ts(end_ms)))
    by_partition = read(startingOffsetsByTimestamp=f'{{"sp-zstd": {{"0": {start_ms}}}}}')
    assert key(by_partition) == key(everything.filter((F.col("partition") != 0) | (F.col("timestamp") >= as_ts(start_ms))))

    split = read(maxRecordsPerPartition="50")
    assert split.rdd.getNumPartitions() >= 12 and key(split) == key(everything)
    assert read(minPartitions="7").rdd.getNumPartitions() >= 7
    with pytest.raises(Exception, match="no record .* has a timestamp"):
        read(startingTimestamp=str(1_800_000_000_000)).count()
    # Strategy latest: such a partition starts at its latest offset (nothing to read in a batch).
    assert read(startingTimestamp=str(1_800_000_000_000), startingOffsetsByTimestampStrategy="latest").count() == 0
    mixed = read(startingOffsetsByTimestamp=f'{{"sp-zstd": {{"0": 1800000000000, "1": {start_ms}}}}}',
                 startingOffsetsByTimestampStrategy="latest")
    assert key(mixed) == key(everything.filter((F.col("partition") > 1)
                                               | ((F.col("partition") == 1) & (F.col("timestamp") >= as_ts(start_ms)))))


def test_bad_options_name_the_problem(spark, produced):
    _, data = produced
    cases = [
        ({"subscribe": "sp-none", "colour": "blue"}, "unknown option"),
        ({"subscribe": "sp-none", "assign": '{"sp-none": [0]}'}, "exactly one of"),
        ({"subscribe": "missing-topic"}, "do not exist"),
        ({"subscribe": "sp-none", "startingOffsets": "sometime"}, "startingOffsets"),
        ({"subscribe": "sp-none", "startingOffsetsByTimestampStrategy": "earliest"}, "must be error or latest"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            spark.read.format("kafscale").options(**options).load(str(data)).count()


@pytest.mark.parametrize("stored_in", ["log object", "segment"])
def test_corrupt_data_gives_the_documented_error(spark, tmp_path, stored_in):
    compacted = stored_in == "segment"
    gateway = GatewayProcess(tmp_path / "data", "--compaction-delay-ms", "0" if compacted else "600000").start()
    partition_dir = tmp_path / "data" / "kafscale" / "bad" / "0"
    try:
        producer = Producer({"bootstrap.servers": gateway.bootstrap})
        for _ in range(20):
            producer.produce("bad", value=b"x" * 50, partition=0)
        assert producer.flush(10) == 0
        deadline = time.monotonic() + 20
        while compacted and not list(partition_dir.glob("*.kfs")) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        gateway.stop()
    if compacted:
        (target,) = sorted(partition_dir.glob("*.kfs"))
    else:
        target = max((tmp_path / "data" / "kafscale" / "~log").glob("*/*.kfl"), key=lambda p: p.stat().st_size)
    raw = bytearray(target.read_bytes())
    raw[100] ^= 0xFF
    target.write_bytes(bytes(raw))
    with pytest.raises(Exception, match="CorruptSegmentError|is corrupt"):
        spark.read.format("kafscale").option("subscribe", "bad").load(str(tmp_path / "data")).count()


def test_explicit_register_also_works(spark, produced):
    from kafscale.spark_connector import register

    _, data = produced
    register(spark)
    assert spark.read.format("kafscale").option("subscribe", "sp-none").load(str(data)).count() == 600


def test_reads_a_topic_written_to_s3(spark, tmp_path, seaweed_server):
    """Storage options reach the executors: a topic a gateway wrote to S3 (SeaweedFS, real
    SigV4) reads back equal to what a consumer gets."""
    location = seaweed_server.location()
    gateway = GatewayProcess(tmp_path / "unused", "--storage", location, *seaweed_server.gateway_args()).start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("sp-s3", num_partitions=3, replication_factor=1)])["sp-s3"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "compression.type": "lz4", "linger.ms": 5})
        for i in range(600):
            producer.produce("sp-s3", key=f"k{i}".encode(), value=f"value-{i}".encode(),
                             headers=[("n", str(i).encode())], timestamp=1_700_000_000_000 + i)
        assert producer.flush(10) == 0
        options = seaweed_server.options()
        df = (spark.read.format("kafscale").option("subscribe", "sp-s3").option("includeHeaders", "true")
              .option("s3.endpoint", options.endpoint).option("s3.region", options.region)
              .option("s3.accessKeyId", options.access_key_id).option("s3.secretAccessKey", options.secret_access_key)
              .option("s3.pathStyle", "true").option("s3.allowHttp", "true").load(location))
        rows = [
            (bytes(r.key), bytes(r.value), r.topic, r.partition, r.offset,
             int(r.timestamp.replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000), r.timestampType,
             [(h.key, bytes(h.value)) for h in r.headers])
            for r in df.orderBy("partition", "offset").collect()
        ]
        assert len(rows) == 600 and rows == _consume(gateway, "sp-s3")
    finally:
        gateway.kill()


def test_a_partly_compacted_topic_reads_as_a_consumer_sees_it(spark, tmp_path):
    """Segments (compacted), log objects already compacted but not yet deleted, and the newest
    records only in log objects: Spark returns exactly the consumer's records, once each."""
    data = tmp_path / "data"
    gateway = GatewayProcess(data, "--compaction-delay-ms", "0").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("sp-part", num_partitions=3, replication_factor=1)])["sp-part"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
        for i in range(300):
            producer.produce("sp-part", key=f"k{i}".encode(), value=f"value-{i}".encode())
        assert producer.flush(10) == 0
        deadline = time.monotonic() + 20
        while len(list((data / "kafscale" / "sp-part").glob("*/*.kfs"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        gateway.stop()
    gateway = GatewayProcess(data, "--compaction-delay-ms", "600000").start()  # the rest stays in log objects
    try:
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
        for i in range(300, 600):
            producer.produce("sp-part", key=f"k{i}".encode(), value=f"value-{i}".encode())
        assert producer.flush(10) == 0
        assert len(list((data / "kafscale" / "sp-part").glob("*/*.kfs"))) >= 3
        assert list((data / "kafscale" / "~log").glob("*/*.kfl"))
        df = spark.read.format("kafscale").option("subscribe", "sp-part").load(str(data))
        rows = [(bytes(r.key), bytes(r.value), r.partition, r.offset) for r in df.orderBy("partition", "offset").collect()]
        consumed = [(r[0], r[1], r[3], r[4]) for r in _consume(gateway, "sp-part")]
        assert len(rows) == 600 and rows == consumed
    finally:
        gateway.kill()


def test_format_kafscale_resolves_from_another_directory(produced, tmp_path):
    """Issue 20 item 17: after the README's editable install, a job started outside the source
    tree failed with DATA_SOURCE_NOT_FOUND (setuptools' default editable finder hides
    ``pyspark_kafscale`` from pkgutil, which Spark's discovery walks). A fresh process in
    another directory, no register call."""
    import subprocess

    _, data = produced
    job = (
        "import os, sys; from pyspark.sql import SparkSession\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "s = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        f"print('ROWS', s.read.format('kafscale').option('subscribe', 'sp-none').load({str(data)!r}).count())\n"
        "s.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", job], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert "ROWS 600" in done.stdout, done.stderr[-3000:]


def test_a_cleaned_compacted_topic_reads_as_a_consumer_sees_it(spark, tmp_path):
    """A compacted topic after the cleaner: segments with gaps, empty batches kept for
    producers and the log's end, tombstones (null values), and the newest records still
    in log objects. The DataFrame holds exactly the consumer's records."""
    data = tmp_path / "data"
    gateway = GatewayProcess(data, "--compaction-delay-ms", "200", "--cleaner-backoff-ms", "200").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("sp-compact", num_partitions=2, replication_factor=1,
                                      config={"cleanup.policy": "compact"})])["sp-compact"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                             "compression.type": "zstd"})
        for i in range(3000):
            value = None if i % 97 == 0 else f"value-{i}".encode()
            producer.produce("sp-compact", key=f"k{i % 150}".encode(), value=value, partition=i % 2)
            if i % 500 == 499:
                producer.flush(10)
        assert producer.flush(10) == 0
        deadline = time.monotonic() + 60
        while gateway.metric("kafscale_cleaner_records_removed") < 2500 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gateway.metric("kafscale_cleaner_records_removed") >= 2500
        df = spark.read.format("kafscale").option("subscribe", "sp-compact").load(str(data))
        rows = [(bytes(r.key), r.value and bytes(r.value), r.partition, r.offset)
                for r in df.orderBy("partition", "offset").collect()]
        consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "check", "enable.auto.commit": False,
                             "enable.partition.eof": True})
        consumer.assign([TopicPartition("sp-compact", p, 0) for p in range(2)])
        consumed, ends = [], 0
        while ends < 2:
            message = consumer.poll(10)
            assert message is not None
            if message.error():
                ends += 1
                continue
            consumed.append((message.key(), message.value(), message.partition(), message.offset()))
        consumer.close()
        assert len(rows) < 1000 and rows == sorted(consumed, key=lambda r: (r[2], r[3]))
        assert any(value is None for _, value, _, _ in rows)
    finally:
        gateway.kill()


def _python_blocks(doc: str) -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / doc).read_text()
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_the_docs_read_examples_run_as_written(spark, tmp_path, monkeypatch):
    """Every docs/spark.md example that reads a local ./data runs as printed (the gateway's
    address and the data directory aside: Spark's workers keep the session's working
    directory); one of them called .option after .load() and failed."""
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        for topic in ("orders", "orders-eu"):
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5})
        for i in range(1200):
            producer.produce("orders-eu" if i % 2 else "orders", key=b"k%d" % i, value=b"v%d" % i,
                             headers=[("n", b"%d" % i)])
        assert producer.flush(10) == 0
        monkeypatch.chdir(tmp_path)  # out/ and chk/ of the streaming example
        blocks = [b for b in _python_blocks("spark.md") if 'load("./data")' in b]
        assert len(blocks) >= 4, blocks  # the read, stream, progress and pattern examples
        for block in blocks:
            names = {"spark": spark}
            code = block.replace("127.0.0.1:9092", gateway.bootstrap).replace('"./data"', repr(str(tmp_path / "data")))
            code = code.replace('"out/"', repr(str(tmp_path / "out"))).replace('"chk/"', repr(str(tmp_path / "chk")))
            try:
                exec(compile(code, "docs/spark.md", "exec"), names)  # noqa: S102 - the docs' own code
                if "df" in names:
                    assert names["df"].count() == 600
                if "query" in names:
                    names["query"].awaitTermination(120)
                    assert names["query"].exception() is None
            except Exception as exc:
                raise AssertionError(f"this docs/spark.md example fails:\n{block}") from exc
    finally:
        gateway.kill()
