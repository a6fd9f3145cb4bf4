"""The records of Kafka's ``__consumer_offsets`` topic, in Kafka's own key/value schemas, so
tools that consume it (Burrow, lag exporters, mirror tooling) read every group's commits.

Keys and values are Kafka's ``OffsetCommitKey`` v1 / ``OffsetCommitValue`` v3 and
``GroupMetadataKey`` v2 / ``GroupMetadataValue`` v3 (the versions Kafka 3.9 and 4.x write
for classic groups); a group goes to partition ``abs(groupId.hashCode()) % partitions``,
Java's ``String.hashCode`` as Kafka computes it. A ``None`` value is a tombstone (offsets
deleted, group deleted). Bytes out, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "OFFSETS_TOPIC",
    "GroupMember",
    "java_string_hash",
    "offsets_partition",
    "offset_commit_key",
    "offset_commit_value",
    "group_metadata_key",
    "group_metadata_value",
    "parse_key",
    "parse_offset_commit_value",
]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def offsets_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (``abs(MIN_VALUE)`` is 0)."""
    value = java_string_hash(group_id)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError("a Kafka string is at most 32,767 bytes")
    return _INT16.pack(len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return _INT16.pack(-1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data


def offset_commit_key(group_id: str, topic: str, partition: int) -> bytes:
    return _INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group_id) + _string(topic) + _INT32.pack(partition)


def offset_commit_value(offset: int, leader_epoch: int, metadata: str | None, commit_ms: int) -> bytes:
    return (_INT16.pack(OFFSET_COMMIT_VALUE_VERSION) + _INT64.pack(offset) + _INT32.pack(leader_epoch)
            + _string(metadata or "") + _INT64.pack(commit_ms))


def group_metadata_key(group_id: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group_id)


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


def group_metadata_value(protocol_type: str, generation: int, protocol: str | None, leader: str | None,
                         state_ms: int, members: Sequence[GroupMember]) -> bytes:
    parts = [_INT16.pack(GROUP_METADATA_VALUE_VERSION), _string(protocol_type), _INT32.pack(generation),
             _nullable_string(protocol), _nullable_string(leader), _INT64.pack(state_ms), _INT32.pack(len(members))]
    for member in members:
        parts += [_string(member.member_id), _nullable_string(member.group_instance_id), _string(member.client_id),
                  _string(member.client_host), _INT32.pack(member.rebalance_timeout_ms),
                  _INT32.pack(member.session_timeout_ms), _bytes(member.subscription), _bytes(member.assignment)]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, layout: struct.Struct) -> int:
        (value,) = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return value

    def string(self) -> str | None:
        size = self.take(_INT16)
        if size < 0:
            return None
        text = self.data[self.pos:self.pos + size]
        if len(text) != size:
            raise ValueError("a string runs past the record")
        self.pos += size
        return text.decode()


def parse_key(data: bytes) -> tuple[str, str, int] | tuple[str] | None:
    """(group, topic, partition) of an offset commit key, (group,) of a group metadata key;
    None for a key of another kind (Kafka 4's consumer-group records, for example)."""
    reader = _Reader(data)
    version = reader.take(_INT16)
    group = reader.string() or ""
    if version in (0, 1):
        topic = reader.string() or ""
        return group, topic, reader.take(_INT32)
    if version == 2:
        return (group,)
    return None


def parse_offset_commit_value(data: bytes) -> tuple[int, int, str, int]:
    """(offset, leader epoch, metadata, commit timestamp) of versions 1 and 3."""
    reader = _Reader(data)
    version = reader.take(_INT16)
    offset = reader.take(_INT64)
    epoch = reader.take(_INT32) if version >= 3 else -1
    metadata = reader.string() or ""
    return offset, epoch, metadata, reader.take(_INT64)
