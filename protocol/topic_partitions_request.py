"""DescribeTopicPartitions v0 requests, decoded here: its ``cursor`` is a nullable struct
(an int8 marker, -1 for null, before the fields), which kio writes but its reader does not
read (it reads the struct unconditionally). Sans-io: bytes in, plain values out."""

from __future__ import annotations

from .errors import MalformedFrame
from .guard import Cursor

__all__ = ["decode_topic_partitions_body"]


def _string(cursor: Cursor) -> str:
    size = cursor.uvarint() - 1
    if size < 0:
        raise MalformedFrame("null where a topic name is required")
    cursor.need(size)
    raw = cursor.data[cursor.pos:cursor.pos + size]
    cursor.pos += size
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise MalformedFrame("a topic name is not valid UTF-8") from exc


def _int8(cursor: Cursor) -> int:
    cursor.need(1)
    value = int.from_bytes(cursor.data[cursor.pos:cursor.pos + 1], "big", signed=True)
    cursor.pos += 1
    return value


def _skip_tagged_fields(cursor: Cursor) -> None:
    for _ in range(cursor.uvarint()):
        cursor.uvarint()
        size = cursor.uvarint()
        cursor.need(size)
        cursor.pos += size


def decode_topic_partitions_body(frame: bytes, pos: int) -> tuple[dict, int]:
    """The body's values (for kio's request class) and where it ends."""
    reader = Cursor(frame, pos, len(frame))
    count = reader.uvarint() - 1
    if count < 0 or count > len(frame) - reader.pos:  # each topic takes at least a byte
        raise MalformedFrame(f"{count} topics cannot fit in the request")
    topics = []
    for _ in range(count):
        topics.append(dict(name=_string(reader)))
        _skip_tagged_fields(reader)
    limit = reader.int32()
    cursor = None
    if _int8(reader) >= 0:  # the nullable struct's marker: -1 for null
        cursor = dict(topic_name=_string(reader), partition_index=reader.int32())
        _skip_tagged_fields(reader)
    _skip_tagged_fields(reader)
    return dict(topics=topics, response_partition_limit=limit, cursor=cursor), reader.pos
