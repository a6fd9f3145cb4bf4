"""A length guard run before kio's native decoder sees untrusted bytes.

kio's decoder sizes its allocations from the length prefixes of arrays before
checking them against the buffer, so a 40-byte frame announcing a 2-billion
element array makes it allocate tens of GiB and abort the process. This walk
follows the same schema, in Python, and rejects any array, string or bytes
length that cannot fit in what is left of the frame; only frames that pass
reach kio. It reads lengths only, so it costs a few microseconds per request.

It also refuses a null (length -1) array or string where the schema does not
allow one: kio would hand the handlers ``None`` where they expect a sequence.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .errors import MalformedFrame

__all__ = ["check_lengths", "Cursor"]

_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
    "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A plan per entity: (kind, kafka_type, nested entity, nullable) for each field.
_ENTITY, _ENTITY_ARRAY, _PRIMITIVE, _PRIMITIVE_ARRAY = range(4)


@cache
def _plan(entity_type: Any) -> tuple[tuple[tuple, ...], dict[int, tuple]]:
    regular = []
    tagged = {}
    for item in fields(entity_type):
        if item.name.startswith("__"):
            continue
        classified = classify_field(item)
        nullable = is_optional(item)
        step: tuple[int, str | None, type | None, bool]
        if isinstance(classified, EntityTupleField):
            step = (_ENTITY_ARRAY, None, classified.type_, nullable)
        elif isinstance(classified, EntityField):
            step = (_ENTITY, None, classified.type_, nullable)
        elif isinstance(classified, PrimitiveTupleField):
            step = (_PRIMITIVE_ARRAY, item.metadata["kafka_type"], None, nullable)
        else:
            assert isinstance(classified, PrimitiveField)
            step = (_PRIMITIVE, item.metadata["kafka_type"], None, nullable)
        tag = get_field_tag(item)
        if tag is None:
            regular.append(step)
        else:
            tagged[int(tag)] = step
    return tuple(regular), tagged


class Cursor:
    """A bounded reader of untrusted bytes: every length is checked against ``end``."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def need(self, size: int) -> None:
        if size < 0 or self.pos + size > self.end:
            raise MalformedFrame(f"length {size} at byte {self.pos} runs past the end of the request")

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            self.need(1)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise MalformedFrame(f"varint too long at byte {self.pos}")

    def int16(self) -> int:
        self.need(2)
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return value

    def int32(self) -> int:
        self.need(4)
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value


def check_lengths(entity_type: type, data: bytes, pos: int) -> None:
    """Raise :class:`MalformedFrame` if any length in ``data[pos:]`` cannot fit."""
    _walk_entity(entity_type, Cursor(data, pos, len(data)))


def _walk_entity(entity_type: Any, cursor: Cursor) -> None:
    regular, tagged = _plan(entity_type)
    flexible = entity_type.__flexible__
    for step in regular:
        _walk_step(step, cursor, flexible)
    if flexible:
        for _ in range(cursor.uvarint()):
            tag = cursor.uvarint()
            size = cursor.uvarint()
            cursor.need(size)
            found = tagged.get(tag)
            if found is None:
                cursor.pos += size
                continue
            inner = Cursor(cursor.data, cursor.pos, cursor.pos + size)
            _walk_step(found, inner, flexible)
            cursor.pos += size


def _array_length(cursor: Cursor, flexible: bool, nullable: bool) -> int:
    count = cursor.uvarint() - 1 if flexible else cursor.int32()
    if count < 0 and not nullable:
        raise MalformedFrame(f"null array at byte {cursor.pos} where the schema requires one")
    if count > cursor.end - cursor.pos:  # every element takes at least one byte
        raise MalformedFrame(f"array of {count} elements at byte {cursor.pos} cannot fit in the request")
    return count


def _walk_step(step: tuple, cursor: Cursor, flexible: bool) -> None:
    kind, kafka_type, nested, nullable = step
    if kind == _PRIMITIVE:
        _walk_primitive(kafka_type, cursor, flexible, nullable)
    elif kind == _ENTITY:
        _walk_entity(nested, cursor)
    elif kind == _ENTITY_ARRAY:
        for _ in range(_array_length(cursor, flexible, nullable)):
            _walk_entity(nested, cursor)
    else:
        # Array elements are never null, whatever the array itself may be.
        for _ in range(_array_length(cursor, flexible, nullable)):
            _walk_primitive(kafka_type, cursor, flexible, False)


def _walk_primitive(kafka_type: str, cursor: Cursor, flexible: bool, nullable: bool) -> None:
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        cursor.need(fixed)
        cursor.pos += fixed
        return
    if kafka_type == "string":
        size = cursor.uvarint() - 1 if flexible else cursor.int16()
    elif kafka_type in ("bytes", "records"):
        size = cursor.uvarint() - 1 if flexible else cursor.int32()
    else:
        raise MalformedFrame(f"no length rule for field type {kafka_type}")
    if size < 0 and not nullable:
        raise MalformedFrame(f"null {kafka_type} at byte {cursor.pos} where the schema requires one")
    if size > 0:
        cursor.need(size)
        cursor.pos += size
