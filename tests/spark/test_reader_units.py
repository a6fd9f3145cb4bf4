"""The stream reader's offset arithmetic and the executor's errors, without a Spark session
(pyspark is imported for its classes only)."""

import time

import pytest
from confluent_kafka import Producer

from tests.support.gateway_process import GatewayProcess

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kafscale.spark_connector.options import OptionError, parse_options  # noqa: E402
from kafscale.spark_connector.planning import plan  # noqa: E402
from kafscale.spark_connector.rows import read_range  # noqa: E402
from kafscale.spark_connector.stored_log import DataLossError  # noqa: E402
from kafscale.spark_connector.streaming import KafscaleStreamReader  # noqa: E402
from kafscale.spark_connector.tasks import open_location  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("units") / "data"
    gateway = GatewayProcess(root).start()
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("units", value=b"%d" % i, partition=0)
        if i % 10 == 9:
            producer.flush(10)
    assert producer.flush(10) == 0
    gateway.stop()
    return root


def _reader(data, **options):
    return KafscaleStreamReader(parse_options({"path": str(data), "subscribe": "units", **options}), open_location)


def test_min_offsets_per_trigger_waits_then_gives_in_after_the_delay(data):
    waiting = _reader(data, minOffsetsPerTrigger="100")
    start = waiting.initialOffset()
    assert start == {"units": {"0": 0}}
    assert waiting.latestOffset(start, ReadMinRows(100)) == start  # 30 < 100: wait
    assert waiting.latestOffset(start, ReadAllAvailable()) == {"units": {"0": 30}}  # the engine overrides
    impatient = _reader(data, minOffsetsPerTrigger="100", maxTriggerDelay="0ms")
    assert impatient.latestOffset(start, ReadMinRows(100)) == {"units": {"0": 30}}


def test_max_offsets_per_trigger_and_available_now(data):
    reader = _reader(data, maxOffsetsPerTrigger="12")
    start = reader.initialOffset()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert first == {"units": {"0": 12}}
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(first, ReadAllAvailable()) == {"units": {"0": 30}}
    assert _reader(data, startingOffsets="latest").initialOffset() == {"units": {"0": 30}}
    assert reader.latestOffset({"units": {"0": 30}}, ReadMaxRows(5)) == {"units": {"0": 30}}


def test_a_piece_deleted_after_planning_and_in_no_segment_is_data_loss(data, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    options = parse_options({"path": str(copy), "subscribe": "units"})
    (part,) = plan(open_location(options), options)
    (copy / part.pieces[1].key).unlink()  # a log object (compacted and deleted by the janitor)
    with pytest.raises(DataLossError, match="deleted after planning"):
        list(read_range(open_location(options), part, include_headers=False))


def test_a_location_or_namespace_without_topics_says_what_to_check(data):
    for options in ({"path": str(data), "namespace": "elsewhere"}, {"path": str(data.parent)}):
        with pytest.raises(OptionError, match="no topic at all is stored there.*--storage.*--namespace"):
            parsed = parse_options({**options, "subscribe": "units"})
            plan(open_location(parsed), parsed)


def test_option_errors():
    with pytest.raises(OptionError, match="maxTriggerDelay"):
        parse_options({"path": "x", "subscribe": "t", "maxTriggerDelay": "soon"})
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_options({"path": "x", "subscribe": "t", "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(OptionError, match="not both"):
        parse_options({"path": "x", "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"})
    with pytest.raises(OptionError, match="needs the data location"):
        parse_options({"subscribe": "t"})
    with pytest.raises(OptionError, match="needs the data location"):
        parse_options({"path": "", "subscribe": "t"})
    # Every option of Spark's Kafka source works or is refused by name with the reason.
    for name in ("kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "groupIdPrefix", "kafka.group.id",
                 "kafka.max.poll.records"):
        with pytest.raises(OptionError, match=f"(?i){name}.*no Kafka consumer"):
            parse_options({"path": "x", "subscribe": "t", name: "1"})
    with pytest.raises(OptionError, match="progressGroup commits offsets through the gateways"):
        parse_options({"path": "x", "subscribe": "t", "progressGroup": "g"})
    assert parse_options({"path": "x", "subscribe": "t", "progressGroup": "g", "kafka.bootstrap.servers": "h:1",
                          "kafka.security.protocol": "SSL"}).client.security.tls


def test_segments_merged_after_planning_are_read_from_the_merged_one(data, tmp_path):
    """A gateway merges small segments while an executor reads: the segments it was given are
    gone, and their offsets are read from the rewritten first one."""
    import shutil

    from kafscale.protocol import build_batch
    from kafscale.protocol.layout import segment_key
    from kafscale.protocol.records import Record, restamp, split_batches
    from kafscale.protocol.segment import SegmentBuilder, read_segment
    from kafscale.storage_backends import LocalBackend

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    shutil.rmtree(copy / "kafscale" / "~log")
    for old in (copy / "kafscale" / "units" / "0").glob("*"):
        old.unlink()
    store = LocalBackend(copy)
    for base in range(0, 30, 3):
        batch = bytearray(build_batch([Record(i - base, 1000 + i, None, b"%d" % i) for i in range(base, base + 3)]))
        builder = SegmentBuilder(base)
        builder.append(batch, restamp(batch, split_batches(batch), base))
        store.put_if_absent(segment_key("kafscale", "units", 0, base), builder.seal(0))
    options = parse_options({"path": str(copy), "subscribe": "units"})
    (part,) = plan(open_location(options), options)
    assert len(part.pieces) == 10
    first = segment_key("kafscale", "units", 0, 0)
    _, version = store.get_versioned(first)
    merged = SegmentBuilder(0)
    for piece in part.pieces:
        segment = read_segment(store.get(piece.key))
        for batch in segment.batches:
            merged.append(segment.batch_bytes(batch), split_batches(bytearray(segment.batch_bytes(batch))))
    store.put_if_unchanged(first, merged.seal(0), version)
    for piece in part.pieces[1:]:
        store.delete(piece.key)
    rows = [r for b in read_range(open_location(options), part, include_headers=False) for r in b.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [(i, b"%d" % i) for i in range(30)]


def test_an_unreachable_progress_group_never_fails_or_holds_up_the_query(data):
    from devkit.ports import free_port

    reader = _reader(data, progressGroup="lag", **{"kafka.bootstrap.servers": f"127.0.0.1:{free_port()}"})
    start = reader.initialOffset()
    began = time.monotonic()
    assert reader.latestOffset(start, ReadAllAvailable()) == {"units": {"0": 30}}  # the commit failed, logged
    assert time.monotonic() - began < 15
    began = time.monotonic()
    reader.commit({"units": {"0": 30}})  # paused after the failure: not tried again at once
    assert time.monotonic() - began < 1
