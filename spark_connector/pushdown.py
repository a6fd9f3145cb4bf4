"""Filters Spark pushes to the reader (PySpark 4.1+'s ``DataSourceReader.pushFilters``) as
bounds the planner prunes with, before anything is read: which partitions, which offsets,
and the earliest timestamp.

Filters on ``partition`` and ``offset`` are applied exactly by planning (Spark does not
evaluate them again). A lower bound on ``timestamp`` starts each partition at its first
record at or after it (found through the segments' sparse indexes: every earlier record is
older), but Kafka timestamps need not grow with offsets, so Spark still evaluates timestamp
filters on the rows read.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["Bounds", "NO_BOUNDS", "push"]


@dataclass(frozen=True)
class Bounds:
    partitions: frozenset[int] | None = None  # None: any partition in [first_partition, end_partition)
    first_partition: int = 0
    end_partition: int | None = None
    first_offset: int = 0  # inclusive
    end_offset: int | None = None  # exclusive; None: no bound
    earliest_timestamp_ms: int | None = None  # no record before it is wanted

    def allows(self, partition: int) -> bool:
        return (self.partitions is None or partition in self.partitions) and partition >= self.first_partition \
            and (self.end_partition is None or partition < self.end_partition)

    def clip(self, start: int, end: int) -> tuple[int, int]:
        return max(start, self.first_offset), end if self.end_offset is None else min(end, self.end_offset)


NO_BOUNDS = Bounds()


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lower(current: int, new: int | None) -> int:
    return current if new is None else max(current, new)


def _upper(current: int | None, new: int | None) -> int | None:
    return current if new is None else new if current is None else min(current, new)


def _narrow(bounds: Bounds, item: Filter) -> Bounds | None:
    """``bounds`` narrowed by a filter on partition or offset, or None if it is not one."""
    column = getattr(item, "attribute", None)  # every filter but Not and the string matches has one
    if column not in (("partition",), ("offset",)):
        return None
    if isinstance(item, IsNotNull):
        return bounds  # never null
    if isinstance(item, In):
        values = [_integer(v) for v in item.value]
        if column != ("partition",) or any(v is None for v in values):
            return None  # offsets IN (...): left to Spark
        wanted = frozenset(v for v in values if v is not None)
        return replace(bounds, partitions=wanted if bounds.partitions is None else bounds.partitions & wanted)
    value = _integer(getattr(item, "value", None))
    if value is None:
        return None
    low, high = {EqualTo: (value, value + 1), GreaterThan: (value + 1, None), GreaterThanOrEqual: (value, None),
                 LessThan: (None, value), LessThanOrEqual: (None, value + 1)}.get(type(item), (None, None))
    if low is None and high is None:
        return None
    if column == ("partition",):
        return replace(bounds, first_partition=_lower(bounds.first_partition, low),
                       end_partition=_upper(bounds.end_partition, high))
    return replace(bounds, first_offset=_lower(bounds.first_offset, low), end_offset=_upper(bounds.end_offset, high))


def _earliest_ms(item: Filter) -> int | None:
    """A lower bound (milliseconds) of the timestamps a filter keeps, if it gives one
    (rounded down: Spark still applies the filter itself)."""
    if getattr(item, "attribute", None) != ("timestamp",) or not isinstance(item, (GreaterThan, GreaterThanOrEqual, EqualTo)):
        return None
    value = getattr(item, "value", None)
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:  # Spark gives UTC-aware datetimes; a naive one is taken as UTC
        value = value.replace(tzinfo=datetime.UTC)
    return int(value.timestamp() * 1000) - 1


def push(filters: Iterable[Filter], bounds: Bounds = NO_BOUNDS) -> tuple[Bounds, list[Filter]]:
    """Bounds from the filters planning applies, and the filters Spark must still evaluate."""
    left: list[Filter] = []
    for item in filters:
        narrowed = _narrow(bounds, item)
        if narrowed is not None:
            bounds = narrowed
            continue
        earliest = _earliest_ms(item)
        if earliest is not None and (bounds.earliest_timestamp_ms is None or earliest > bounds.earliest_timestamp_ms):
            bounds = replace(bounds, earliest_timestamp_ms=earliest)
        left.append(item)
    return bounds, left
