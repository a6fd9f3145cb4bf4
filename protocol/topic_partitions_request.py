"""DescribeTopicPartitions v0 requests, decoded here: its ``cursor`` is a nullable struct
(an int8 marker, -1 for null, before the fields), which kio writes but its reader does not
read (it reads the struct unconditionally). Sans-io: bytes in, plain values out."""

from __future__ import annotations

import struct

from .errors import MalformedFrame

__all__ = ["decode_topic_partitions_body"]

_I32 = struct.Struct(">i")


class _Flexible:
    """Reads the compact (flexible-version) encoding, every length checked against the frame."""

    def __init__(self, frame: bytes, pos: int) -> None:
        self.frame, self.pos = frame, pos

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.frame):
                raise MalformedFrame("truncated varint")
            byte = self.frame[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedFrame("varint too long")

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.frame):
            raise MalformedFrame(f"length {size} at byte {self.pos} runs past the end of the request")
        piece = self.frame[self.pos:self.pos + size]
        self.pos += size
        return piece

    def int8(self) -> int:
        return int.from_bytes(self.take(1), "big", signed=True)

    def int32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def string(self) -> str:
        size = self.uvarint() - 1
        if size < 0:
            raise MalformedFrame("null where a topic name is required")
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as exc:
            raise MalformedFrame("a topic name is not valid UTF-8") from exc

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_topic_partitions_body(frame: bytes, pos: int) -> tuple[dict, int]:
    """The body's values (for kio's request class) and where it ends."""
    reader = _Flexible(frame, pos)
    count = reader.uvarint() - 1
    if count < 0 or count > len(frame) - reader.pos:  # each topic takes at least a byte
        raise MalformedFrame(f"{count} topics cannot fit in the request")
    topics = []
    for _ in range(count):
        topics.append(dict(name=reader.string()))
        reader.skip_tagged_fields()
    limit = reader.int32()
    marker = reader.int8()
    cursor = None
    if marker >= 0:
        cursor = dict(topic_name=reader.string(), partition_index=reader.int32())
        reader.skip_tagged_fields()
    reader.skip_tagged_fields()
    return dict(topics=topics, response_partition_limit=limit, cursor=cursor), reader.pos
