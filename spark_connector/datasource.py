"""The PySpark data source ``kafscale``: ``spark.read.format("kafscale")`` and
``df.write.format("kafscale")`` (and their streaming forms).

Same columns and option names as Spark's Kafka source and sink; the data is read
straight from storage (planning on the driver, segments fetched and decoded on
executors) and written through the gateways (:mod:`.sink`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition

from .options import OptionError, ReadOptions, parse_options
from .planning import plan
from .pushdown import NO_BOUNDS, push
from .sink import KafscaleBatchWriter, KafscaleStreamWriter, check_columns
from .streaming import KafscaleStreamReader
from .tasks import KafscaleInputPartition, open_location, read_rows, spark_schema
from .write_options import WriteOptions, parse_write_options

__all__ = ["KafscaleDataSource", "register"]


class KafscaleBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.bounds = NO_BOUNDS  # what pushed filters prune (KafscalePushdownReader)

    def partitions(self) -> list[InputPartition]:
        ranges = plan(open_location(self.options), self.options, self.bounds)
        return [KafscaleInputPartition(r, self.options) for r in ranges]

    def read(self, partition: InputPartition):
        if not isinstance(partition, KafscaleInputPartition):
            return  # nothing planned: Spark still runs one default partition
        yield from read_rows(open_location(partition.options), partition)


class KafscalePushdownReader(KafscaleBatchReader):
    """The batch reader taking Spark's pushed filters (:mod:`.pushdown`): a separate class
    because PySpark refuses a reader that implements pushFilters unless
    spark.sql.python.filterPushdown.enabled is set."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds, left = push(filters, self.bounds)
        return left


class KafscaleDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafscale"

    # Options are parsed by what is asked for: reading and writing take different ones.

    def _read_options(self) -> ReadOptions:
        return parse_options(dict(self.options))

    def _write_options(self, schema, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise OptionError("format kafscale appends to topics: save mode overwrite is not supported "
                              "(as in Spark's Kafka sink)")
        options = parse_write_options(dict(self.options))
        check_columns(schema, options)
        return options

    def schema(self) -> str:
        return spark_schema(self._read_options())

    def reader(self, schema) -> DataSourceReader:
        options = self._read_options()
        if options.progress_group is not None:
            raise OptionError("option progressGroup is for streams (it commits each micro-batch's end offsets)")
        return (KafscalePushdownReader if options.push_filters else KafscaleBatchReader)(options)

    def streamReader(self, schema):
        options = self._read_options()
        if options.ending_given:
            raise OptionError("option endingOffsets is not valid in streaming queries (as in Spark's Kafka source)")
        return KafscaleStreamReader(options, open_location)

    def writer(self, schema, overwrite: bool):
        return KafscaleBatchWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema, overwrite: bool):
        return KafscaleStreamWriter(self._write_options(schema, overwrite))


def register(spark) -> None:
    """Register explicitly (Spark also finds it through the top-level pyspark_kafscale module)."""
    spark.dataSource.register(KafscaleDataSource)
