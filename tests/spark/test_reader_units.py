"""The stream reader's offset arithmetic and the executor's errors, without a Spark session
(pyspark is imported for its classes only)."""

import pytest
from confluent_kafka import Producer

from tests.support.gateway_process import GatewayProcess

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402

from kafscale.spark_connector.datasource import open_location  # noqa: E402
from kafscale.spark_connector.options import OptionError, parse_options  # noqa: E402
from kafscale.spark_connector.planning import DataLossError, plan  # noqa: E402
from kafscale.spark_connector.rows import read_range  # noqa: E402
from kafscale.spark_connector.streaming import KafscaleStreamReader  # noqa: E402


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


def test_option_errors():
    with pytest.raises(OptionError, match="maxTriggerDelay"):
        parse_options({"path": "x", "subscribe": "t", "maxTriggerDelay": "soon"})
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        parse_options({"path": "x", "subscribe": "t", "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(OptionError, match="not both"):
        parse_options({"path": "x", "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "5"})
    with pytest.raises(OptionError, match="needs the data location"):
        parse_options({"subscribe": "t"})
