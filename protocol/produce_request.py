"""Produce request bodies decoded without copying their record sets (sans-io).

Produce is the one request whose bulk is record sets, and kio copies every ``records``
field out of a read-only frame. Here each partition's ``records`` is a memoryview of
the frame itself: a frame received into a bytearray is then stamped (offsets, append
times) in place and written to the log from the same memory. The body is kio's own
``ProduceRequest`` of that version, so handlers see one type either way; a hypothesis
test holds this decoder equal to kio's on every version served.

Every length is checked against what is left of the frame before it is used, and an
array's count against the bytes its smallest elements would need, so hostile counts
cost nothing.
"""

from __future__ import annotations

import datetime
import struct
import sys
import uuid
from functools import cache
from typing import Any

from .errors import MalformedFrame

__all__ = ["decode_produce_body"]

_FIRST_BY_TOPIC_ID = 13  # v13 (KIP-516): topics by id, not name
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
# Smallest encodings: a topic is a name and an empty partition array; a partition an
# index and null records (plus tagged fields when flexible).
_MIN_TOPIC = {False: 2 + 4, True: 1 + 1 + 1}
_MIN_PARTITION = {False: 4 + 4, True: 4 + 1 + 1}


class _Reader:
    __slots__ = ("frame", "view", "pos", "end")

    def __init__(self, frame: bytes | bytearray, pos: int) -> None:
        self.frame = frame
        self.view = memoryview(frame)
        self.pos = pos
        self.end = len(frame)

    def take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > self.end:
            raise MalformedFrame("Produce field runs past the end of the request")
        self.pos = start + size
        return start

    def uvarint(self) -> int:
        value = shift = 0
        frame, pos = self.frame, self.pos
        while True:
            if pos >= self.end:
                raise MalformedFrame("truncated varint in Produce request")
            byte = frame[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise MalformedFrame("varint too long in Produce request")

    def string(self, flexible: bool, nullable: bool) -> str | None:
        if flexible:
            size = self.uvarint() - 1
        else:
            size = _I16.unpack_from(self.frame, self.take(2))[0]
        if size < 0:
            if nullable and size == -1:
                return None
            raise MalformedFrame("null or negative string length in Produce request")
        start = self.take(size)
        try:
            return bytes(self.view[start:start + size]).decode()
        except UnicodeDecodeError as exc:
            raise MalformedFrame("string in Produce request is not valid UTF-8") from exc

    def count(self, flexible: bool, smallest: int) -> int:
        if flexible:
            count = self.uvarint() - 1
        else:
            count = _I32.unpack_from(self.frame, self.take(4))[0]
        if count < 0:
            raise MalformedFrame("null or negative array length in Produce request")
        if count * smallest > self.end - self.pos:
            raise MalformedFrame(f"Produce array of {count} cannot fit in {self.end - self.pos} bytes")
        return count

    def records(self, flexible: bool) -> memoryview | None:
        if flexible:
            size = self.uvarint() - 1
        else:
            size = _I32.unpack_from(self.frame, self.take(4))[0]
        if size < 0:
            if size == -1:
                return None
            raise MalformedFrame("negative records length in Produce request")
        start = self.take(size)
        return self.view[start:start + size]

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


@cache
def _nested_types(body_type: Any) -> tuple[Any, Any]:
    """kio's topic and partition entities of the same version as ``body_type``."""
    module = sys.modules[body_type.__module__]
    return module.TopicProduceData, module.PartitionProduceData


def decode_produce_body(body_type: Any, frame: bytes | bytearray, pos: int) -> tuple[Any, int]:
    """A ``ProduceRequest`` of kio's ``body_type`` (v3 and later) from ``frame[pos:]``, and its
    size; each partition's records a memoryview of ``frame``."""
    topic_type, partition_type = _nested_types(body_type)
    flexible = bool(body_type.__flexible__)
    reader = _Reader(frame, pos)
    transactional_id = reader.string(flexible, nullable=True)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, reader.take(_ACKS_TIMEOUT.size))
    by_id = body_type.__version__ >= _FIRST_BY_TOPIC_ID
    topics = []
    for _ in range(reader.count(flexible, _MIN_TOPIC[flexible])):
        topic_key: dict[str, Any]
        if by_id:
            at = reader.take(16)
            topic_id = uuid.UUID(bytes=bytes(reader.view[at:at + 16]))
            topic_key = {"topic_id": topic_id if topic_id.int else None}  # the zero id is none, as kio reads it
        else:
            topic_key = {"name": reader.string(flexible, nullable=False)}
        partitions = []
        for _ in range(reader.count(flexible, _MIN_PARTITION[flexible])):
            index = _I32.unpack_from(frame, reader.take(4))[0]
            records = reader.records(flexible)
            if flexible:
                reader.skip_tagged_fields()
            partitions.append(partition_type(index=index, records=records))
        if flexible:
            reader.skip_tagged_fields()
        topics.append(topic_type(**topic_key, partition_data=tuple(partitions)))
    if flexible:
        reader.skip_tagged_fields()
    body = body_type(transactional_id=transactional_id, acks=acks,
                     timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=tuple(topics))
    return body, reader.pos - pos
