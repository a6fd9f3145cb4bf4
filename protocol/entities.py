"""Build kio message objects of any version from plain, version-neutral values.

Handlers describe a response once, as dicts and lists with Kafka's field names
and plain ints for times, error codes and durations; :func:`build` turns that
into the dataclass of the negotiated version, keeping the fields that version
has and dropping the ones it does not. This is what keeps one handler per API
instead of one per version.
"""

from __future__ import annotations

import datetime
import typing
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from .errors import ErrorCode

__all__ = ["build", "to_millis", "field_names"]

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


@cache
def _plan(cls: Any) -> tuple[tuple[str, str | None, type | None, bool], ...]:
    """For each field: (name, kafka_type, nested entity type or None, required)."""
    hints = typing.get_type_hints(cls)
    plan = []
    for item in fields(cls):
        if item.name.startswith("__"):
            continue
        nested = _nested_entity(hints[item.name])
        required = item.default is MISSING and item.default_factory is MISSING
        plan.append((item.name, item.metadata.get("kafka_type"), nested, required))
    return tuple(plan)


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(name for name, *_ in _plan(cls))


def _nested_entity(annotation: Any) -> type | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and hasattr(candidate, "__dataclass_fields__"):
            return candidate
        for inner in typing.get_args(candidate):
            if isinstance(inner, type) and hasattr(inner, "__dataclass_fields__"):
                return inner
    return None


def build(cls: Any, values: dict[str, Any]) -> Any:
    """Instantiate ``cls`` (a kio entity) from ``values``; unknown keys are ignored."""
    kwargs = {}
    for name, kafka_type, nested, required in _plan(cls):
        if name not in values:
            if required:
                raise TypeError(f"{cls.__qualname__} v{cls.__version__} needs field {name!r}")
            continue
        value = values[name]
        if nested is not None:
            if isinstance(value, (list, tuple)):
                value = tuple(
                    item if isinstance(item, nested) else build(nested, item) for item in value
                )
            elif isinstance(value, dict):
                value = build(nested, value)
        else:
            value = _convert(kafka_type, value)
        kwargs[name] = value
    return cls(**kwargs)


def _convert(kafka_type: str | None, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(value)
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def to_millis(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """Milliseconds of a kio duration or timestamp (``-1`` for none)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)
