"""What one Spark task reads: a partition range, and the options to open the store with
(executors open it themselves: nothing but the plan travels from the driver)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from kafscale.storage_backends import ObjectStore, S3Options, open_store

from .options import ReadOptions
from .planning import PartitionRange

__all__ = ["KafscaleInputPartition", "open_location"]


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
