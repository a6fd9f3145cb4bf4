"""The PySpark data source ``kafscale``: ``spark.read.format("kafscale")``.

Same columns and option names as Spark's Kafka source; the data is read straight
from storage (planning on the driver, segments fetched and decoded on executors).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kafscale.storage_backends import ObjectStore, S3Options, open_store

from .options import ReadOptions, parse_options
from .planning import PartitionRange, plan
from .rows import HEADERS_DDL, SPARK_SCHEMA, read_range

__all__ = ["KafscaleDataSource", "register"]


def open_location(options: ReadOptions) -> ObjectStore:
    s3 = options.s3
    return open_store(options.path, fsync=False, s3=S3Options(
        endpoint=s3.get("endpoint"), region=s3.get("region"), access_key_id=s3.get("accesskeyid"),
        secret_access_key=s3.get("secretaccesskey"), path_style=s3.get("pathstyle", "false").lower() == "true",
        allow_http=s3.get("allowhttp", "false").lower() == "true",
    ))


@dataclass
class KafscaleInputPartition(InputPartition):
    range: PartitionRange
    options: ReadOptions


class KafscaleBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        ranges = plan(open_location(self.options), self.options)
        return [KafscaleInputPartition(r, self.options) for r in ranges]

    def read(self, partition: KafscaleInputPartition):
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
        from .options import OptionError
        from .streaming import KafscaleStreamReader

        if self.parsed.ending_given:
            raise OptionError("option endingOffsets is not valid in streaming queries (as in Spark's Kafka source)")
        return KafscaleStreamReader(self.parsed, open_location)


def register(spark) -> None:
    """Register explicitly (Spark also finds it through the top-level pyspark_kafscale module)."""
    spark.dataSource.register(KafscaleDataSource)
