"""The PySpark data source ``kafscale``: ``spark.read.format("kafscale")``.

Same columns and option names as Spark's Kafka source; the data is read straight
from storage (planning on the driver, segments fetched and decoded on executors).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .options import OptionError, ReadOptions, parse_options
from .planning import plan
from .rows import HEADERS_DDL, SPARK_SCHEMA, read_range
from .streaming import KafscaleStreamReader
from .tasks import KafscaleInputPartition, open_location

__all__ = ["KafscaleDataSource", "register"]


class KafscaleBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        ranges = plan(open_location(self.options), self.options)
        return [KafscaleInputPartition(r, self.options) for r in ranges]

    def read(self, partition: InputPartition):
        if not isinstance(partition, KafscaleInputPartition):
            return  # nothing planned: Spark still runs one default partition
        store = open_location(partition.options)
        yield from read_range(store, partition.range, partition.options.include_headers)


class KafscaleDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafscale"

    def __init__(self, options) -> None:
        super().__init__(options)
        self.parsed = parse_options(dict(options))

    def schema(self) -> str:
        return SPARK_SCHEMA + (HEADERS_DDL if self.parsed.include_headers else "")

    def reader(self, schema) -> DataSourceReader:
        return KafscaleBatchReader(self.parsed)

    def streamReader(self, schema):
        if self.parsed.ending_given:
            raise OptionError("option endingOffsets is not valid in streaming queries (as in Spark's Kafka source)")
        return KafscaleStreamReader(self.parsed, open_location)


def register(spark) -> None:
    """Register explicitly (Spark also finds it through the top-level pyspark_kafscale module)."""
    spark.dataSource.register(KafscaleDataSource)
