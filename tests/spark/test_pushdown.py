"""Filters on partition, offset and timestamp prune before anything is read, and segments
are read as the byte ranges their sparse index points to: fewer bytes fetched, the same
rows as Spark filtering everything."""

import datetime
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess
from tests.support.spark import spark_session

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")

from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan  # noqa: E402

from kafscale.spark_connector.options import parse_options  # noqa: E402
from kafscale.spark_connector.planning import plan  # noqa: E402
from kafscale.spark_connector.pushdown import NO_BOUNDS, Bounds, push  # noqa: E402
from kafscale.spark_connector.rows import read_range  # noqa: E402
from kafscale.spark_connector.tasks import open_location  # noqa: E402
from kafscale.storage_backends.wrappers import CountingStore

BASE_MS = 1_700_000_000_000
PER_PARTITION = 12_000  # of 1 KiB: a segment above 8 MiB, so compaction writes its sparse index


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pushdown") / "data"
    gateway = GatewayProcess(root, "--compaction-delay-ms", "0").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("big", 2, 1)])["big"].result(10)
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 20, "batch.size": 65536})
        for i in range(PER_PARTITION):
            for partition in (0, 1):
                producer.produce("big", value=b"%d-%d|" % (partition, i) + b"x" * 1000, partition=partition,
                                 timestamp=BASE_MS + i * 10)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while len(list(root.rglob("*.index"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)  # compaction: each partition's segment and its index
        assert len(list(root.rglob("*.index"))) >= 2, sorted(p.name for p in root.rglob("*"))
    finally:
        gateway.stop()
    return root


def _read(data, bounds):
    """The rows read, and the bytes the executors fetched (planning's reads of footers and
    log-object directories are the same with or without bounds)."""
    options = parse_options({"path": str(data), "subscribe": "big"})
    store = CountingStore(open_location(options))
    ranges = plan(store, options, bounds)
    planned = store.bytes_read()
    rows = [(batch.column("partition")[i].as_py(), batch.column("offset")[i].as_py())
            for part in ranges for batch in read_range(store, part, False) for i in range(batch.num_rows)]
    return rows, store.bytes_read() - planned


def test_filters_become_bounds_and_timestamps_stay_with_spark():
    stamp = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    filters = [IsNotNull(("offset",)), In(("partition",), [1, 3]), GreaterThan(("offset",), 5),
               LessThan(("offset",), 100), GreaterThanOrEqual(("timestamp",), stamp), EqualTo(("value",), b"x")]
    bounds, left = push(filters)
    assert bounds == Bounds(partitions=frozenset({1, 3}), first_offset=6, end_offset=100,
                            earliest_timestamp_ms=int(stamp.timestamp() * 1000) - 1)
    assert left == filters[4:]  # the same objects, as PySpark requires
    assert push([EqualTo(("partition",), 2), In(("partition",), [1, 2])])[0].allows(2)
    assert not push([EqualTo(("partition",), 2), In(("partition",), [1, 3])])[0].allows(2)


def test_pruned_and_ranged_reads_fetch_less_and_read_the_same_rows(data):
    everything, whole = _read(data, NO_BOUNDS)
    assert len(everything) == 2 * PER_PARTITION

    tail, tail_bytes = _read(data, Bounds(partitions=frozenset({1}), first_offset=PER_PARTITION - 1500))
    assert tail == [(p, o) for p, o in everything if p == 1 and o >= PER_PARTITION - 1500]
    assert tail_bytes < whole / 8  # one partition, and of its segment only the spans after the index entry

    since = BASE_MS + (PER_PARTITION - 2000) * 10
    late, late_bytes = _read(data, Bounds(earliest_timestamp_ms=since))
    assert late == [(p, o) for p, o in everything if o >= PER_PARTITION - 2000]
    assert late_bytes < whole / 4  # a sixth of the records (planning found where they start)

    middle, middle_bytes = _read(data, Bounds(first_offset=3000, end_offset=3010))
    assert middle == [(p, o) for p, o in everything if 3000 <= o < 3010]
    assert middle_bytes < whole / 8


def test_spark_pushes_filters_and_answers_as_without(data):
    for spark in spark_session("kafscale-pushdown"):
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        since = BASE_MS + 11_000 * 10
        condition = f"partition = 1 AND offset >= 10500 AND offset < 11900 AND timestamp > timestamp_millis({since})"
        reader = spark.read.format("kafscale").option("subscribe", "big")
        pushed = reader.option("pushFilters", "true").load(str(data)).where(condition)
        plain = reader.load(str(data)).where(condition)
        rows = sorted((r.partition, r.offset) for r in pushed.select("partition", "offset").collect())
        assert rows == sorted((r.partition, r.offset) for r in plain.select("partition", "offset").collect())
        assert rows and {p for p, _ in rows} == {1}
        assert pushed.rdd.getNumPartitions() == 1  # partition 0 was never planned
