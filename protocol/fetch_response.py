"""Fetch answers encoded as pieces that leave the stored batches where they are (sans-io).

A Fetch answer is mostly record batches the gateway already holds (cached log objects
and segments). kio would copy each into its output buffer, and ``getvalue`` once more;
here an answer is a list of buffers: small encoded runs of the fields around the
records, and the stored batches themselves as memoryviews, ready for one ``sendmsg``.
Fetch v4 to v18 (every version served); a hypothesis test holds this encoder equal to
kio's on each of them.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from .response_fields import Buffer, Endpoint, write_endpoints, write_leader, write_length, write_string

__all__ = ["FetchPartition", "FetchTopic", "FetchAnswer", "encode_fetch_response"]

_FIRST_FLEXIBLE = 12  # compact strings and arrays, tagged fields
_FIRST_WITH_TOPIC_ID = 13  # topics named by id instead of by name
_FIRST_WITH_LOG_START = 5
_FIRST_WITH_SESSION = 7  # top-level error_code and session_id
_FIRST_WITH_PREFERRED_REPLICA = 11
_FIRST_WITH_ENDPOINTS = 16  # node_endpoints (tagged)

_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION = struct.Struct(">ihqqq")  # index, error_code, high_watermark, last_stable, log_start
_PARTITION_V4 = struct.Struct(">ihqq")  # without log_start
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset


@dataclass(slots=True)
class FetchPartition:
    index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Sequence[Buffer] = ()  # stored batches, byte-exact, in order
    aborted: Sequence[tuple[int, int]] | None = None  # (producer_id, first_offset); read_committed
    current_leader: tuple[int, int] | None = None  # (leader_id, leader_epoch) with NOT_LEADER

    @property
    def records_size(self) -> int:
        return sum(len(piece) for piece in self.records)


@dataclass(slots=True)
class FetchTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartition]


@dataclass(slots=True)
class FetchAnswer:
    topics: list[FetchTopic]
    error_code: int = 0
    session_id: int = 0  # 0: no incremental fetch session
    throttle_time_ms: int = 0
    node_endpoints: list[Endpoint] = field(default_factory=list)


class _Pieces:
    """Fields are gathered into one run until a stored batch interrupts it."""

    __slots__ = ("pieces", "run")

    def __init__(self) -> None:
        self.pieces: list[Buffer] = []
        self.run = bytearray()

    def stored(self, piece: Buffer) -> None:
        if len(piece):
            if self.run:  # batches back to back (partitions with several views) need no run between
                self.pieces.append(bytes(self.run))
                self.run.clear()
            self.pieces.append(piece)

    def done(self) -> list[Buffer]:
        if self.run:
            self.pieces.append(bytes(self.run))
        return self.pieces


def encode_fetch_response(correlation_id: int, version: int, answer: FetchAnswer) -> list[Buffer]:
    """The response payload (header and body, without the size prefix) as pieces to send
    in order; the records pieces are the ones given, not copies."""
    flexible = version >= _FIRST_FLEXIBLE
    out = _Pieces()
    run = out.run
    run += _I32.pack(correlation_id)
    if flexible:
        run += b"\x00"  # response header v1: no tagged fields
    if version >= _FIRST_WITH_SESSION:
        run += _HEAD.pack(answer.throttle_time_ms, answer.error_code, answer.session_id)
    else:
        run += _I32.pack(answer.throttle_time_ms)
    write_length(run, len(answer.topics), flexible, wide=True)
    for topic in answer.topics:
        if version >= _FIRST_WITH_TOPIC_ID:
            run += (topic.topic_id or uuid.UUID(int=0)).bytes
        else:
            write_string(run, topic.name, flexible)
        write_length(run, len(topic.partitions), flexible, wide=True)
        for partition in topic.partitions:
            if version >= _FIRST_WITH_LOG_START:
                run += _PARTITION.pack(partition.index, partition.error_code, partition.high_watermark,
                                       partition.last_stable_offset, partition.log_start_offset)
            else:
                run += _PARTITION_V4.pack(partition.index, partition.error_code, partition.high_watermark,
                                          partition.last_stable_offset)
            if partition.aborted is None:
                run += b"\x00" if flexible else _I32.pack(-1)
            else:
                write_length(run, len(partition.aborted), flexible, wide=True)
                for producer_id, first_offset in partition.aborted:
                    run += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        run += b"\x00"
            if version >= _FIRST_WITH_PREFERRED_REPLICA:
                run += _I32.pack(-1)
            write_length(run, partition.records_size, flexible, wide=True)
            for piece in partition.records:
                out.stored(piece)  # ``run`` goes on empty
            if flexible:
                write_leader(run, 1, partition.current_leader)
        if flexible:
            run += b"\x00"
    if version >= _FIRST_WITH_ENDPOINTS:
        write_endpoints(run, 0, answer.node_endpoints)
    elif flexible:
        run.append(0)
    return out.done()
