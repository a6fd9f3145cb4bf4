"""Produce answers encoded by hand (sans-io), straight into one buffer.

A Produce answer is a few fields per partition, built once per request; kio's generic
writer (an entity built from dicts, then walked field by field) cost more than the rest
of answering. Produce v3 to v13 (every version served); a hypothesis test holds this
encoder equal to kio's on each of them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from .response_fields import Endpoint, write_endpoints, write_leader, write_length, write_string

__all__ = ["ProducePartition", "ProduceTopic", "ProduceAnswer", "encode_produce_response"]

_FIRST_WITH_LOG_START = 5
_FIRST_WITH_RECORD_ERRORS = 8  # record_errors and error_message
_FIRST_FLEXIBLE = 9  # compact strings and arrays, tagged fields
_FIRST_WITH_LEADER = 10  # current_leader and node_endpoints (tagged, KIP-951)
_FIRST_BY_TOPIC_ID = 13  # topics by id (KIP-516)
_NO_TOPIC_ID = uuid.UUID(int=0)

_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqqq")  # index, error_code, base_offset, log_append_time_ms, log_start_offset
_PARTITION_V4 = struct.Struct(">ihqq")  # without log_start_offset


@dataclass(slots=True)
class ProducePartition:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1  # the LogAppendTime stamped, or -1 (CreateTime)
    log_start_offset: int = -1
    record_errors: Sequence[tuple[int, str | None]] = ()  # (batch_index, message) of refused records, v8+
    error_message: str | None = None  # v8+
    current_leader: tuple[int, int] | None = None  # (leader_id, leader_epoch) with NOT_LEADER, v10+


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]
    topic_id: uuid.UUID | None = None  # what v13+ answers by (None: unknown, the zero id)


@dataclass(slots=True)
class ProduceAnswer:
    topics: list[ProduceTopic]
    throttle_time_ms: int = 0
    node_endpoints: list[Endpoint] = field(default_factory=list)  # v10+


def encode_produce_response(correlation_id: int, version: int, answer: ProduceAnswer) -> bytearray:
    """The response payload: header and body, without the size prefix."""
    flexible = version >= _FIRST_FLEXIBLE
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    write_length(out, len(answer.topics), flexible, wide=True)
    for topic in answer.topics:
        if version >= _FIRST_BY_TOPIC_ID:
            out += (topic.topic_id or _NO_TOPIC_ID).bytes
        else:
            write_string(out, topic.name, flexible)
        write_length(out, len(topic.partitions), flexible, wide=True)
        for partition in topic.partitions:
            if version >= _FIRST_WITH_LOG_START:
                out += _PARTITION.pack(partition.index, partition.error_code, partition.base_offset,
                                       partition.log_append_time, partition.log_start_offset)
            else:
                out += _PARTITION_V4.pack(partition.index, partition.error_code, partition.base_offset,
                                          partition.log_append_time)
            if version >= _FIRST_WITH_RECORD_ERRORS:
                write_length(out, len(partition.record_errors), flexible, wide=True)
                for batch_index, message in partition.record_errors:
                    out += _I32.pack(batch_index)
                    write_string(out, message, flexible)
                    if flexible:
                        out.append(0)
                write_string(out, partition.error_message, flexible)
            if flexible:
                write_leader(out, 0, partition.current_leader if version >= _FIRST_WITH_LEADER else None)
        if flexible:
            out.append(0)
    out += _I32.pack(answer.throttle_time_ms)
    if version >= _FIRST_WITH_LEADER:
        write_endpoints(out, 0, answer.node_endpoints)
    elif flexible:
        out.append(0)
    return out
