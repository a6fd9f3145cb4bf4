"""What one Spark task reads: a partition range, and the options to open the store with
(executors open it themselves: nothing but the plan travels from the driver)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from kafscale.storage_backends import ObjectStore, open_store

from .lfs_resolution import LFS_URI_DDL, resolve_pointers
from .options import ReadOptions
from .planning import PartitionRange
from .rows import HEADERS_DDL, SPARK_SCHEMA, read_range

__all__ = ["KafscaleInputPartition", "open_location", "read_rows", "spark_schema"]


def open_location(options: ReadOptions) -> ObjectStore:
    return open_store(options.path, fsync=False, s3=options.s3_options())


def read_rows(store: ObjectStore, partition: KafscaleInputPartition) -> Iterator[pa.RecordBatch]:
    """One task's rows: its range decoded, LFS pointers resolved as the options ask."""
    options = partition.options
    return resolve_pointers(read_range(store, partition.range, options.include_headers), options, store)


def spark_schema(options: ReadOptions) -> str:
    return SPARK_SCHEMA + (HEADERS_DDL if options.include_headers else "") + (
        LFS_URI_DDL if options.lfs_resolve == "uri" else "")


@dataclass
class KafscaleInputPartition(InputPartition):
    range: PartitionRange
    options: ReadOptions
