"""Versions that Kafka 3.9 still serves and kio no longer generates (they were dropped
from Kafka 4.0's schemas by KIP-896): each is decoded into the nearest version kio has
(its *target*), so handlers only ever see that version's request, and the answer they
build for the target is written back in the legacy layout.

Every legacy version here is a non-flexible one that differs from its target by a few
fields (layouts from Kafka 3.9's message JSON files). Where the wire layouts are
identical the target's kio codec is used as is (``decode``/``encode`` is ``None``).
Lengths and counts are checked against the frame before anything is allocated, as
:mod:`.guard` does for kio's decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .api_versions import ApiKey
from .errors import MalformedFrame

__all__ = ["Legacy", "LEGACY_VERSIONS", "legacy", "target_version"]

_I8, _I16, _I32, _I64 = (struct.Struct(f">{c}") for c in "bhiq")
_CONFIG_SOURCE_DEFAULT = 5  # DescribeConfigs v1+ config_source DEFAULT_CONFIG


class _Reader:
    def __init__(self, frame: bytes, pos: int) -> None:
        self.frame, self.pos = frame, pos

    def _take(self, size: int) -> int:
        start = self.pos
        if size < 0 or start + size > len(self.frame):
            raise MalformedFrame(f"field of {size} bytes at {start} runs past the end of the request")
        self.pos += size
        return start

    def int8(self) -> int:
        return _I8.unpack_from(self.frame, self._take(1))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.frame, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.frame, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.frame, self._take(8))[0]

    def boolean(self) -> bool:
        return self.int8() != 0

    def string(self, *, nullable: bool = False) -> str | None:
        size = self.int16()
        if size == -1 and nullable:
            return None
        start = self._take(size)
        try:
            return bytes(self.frame[start: start + size]).decode()
        except UnicodeDecodeError as exc:
            raise MalformedFrame("string is not valid UTF-8") from exc

    def array(self, item: Callable[[_Reader], Any], smallest: int, *, nullable: bool = False) -> list | None:
        """``smallest``: the fewest bytes one element takes, so a count that cannot fit in
        what is left of the frame is refused before anything is read."""
        count = self.int32()
        if count == -1 and nullable:
            return None
        if count < 0 or count * smallest > len(self.frame) - self.pos:
            raise MalformedFrame(f"array of {count} elements cannot fit in the request")
        return [item(self) for _ in range(count)]


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int8(self, value: int) -> None:
        self.parts.append(_I8.pack(value))

    def int16(self, value: int) -> None:
        self.parts.append(_I16.pack(value))

    def int32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def int64(self, value: int) -> None:
        self.parts.append(_I64.pack(value))

    def boolean(self, value: bool) -> None:
        self.int8(1 if value else 0)

    def string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        raw = value.encode()
        self.int16(len(raw))
        self.parts.append(raw)

    def array(self, items, write: Callable[[Any], None]) -> None:
        self.int32(len(items))
        for item in items:
            write(item)

    def topics(self, topics, name: str, partition: Callable[[Any], None]) -> None:
        """The common shape: topics, each its name (attribute ``name``) and its partitions."""
        def topic(t: Any) -> None:
            self.string(getattr(t, name))
            self.array(t.partitions, partition)

        self.array(topics, topic)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


def _millis(value: Any) -> int:
    return round(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


# -- OffsetCommit v0 (no generation, member or retention) and v1 (a commit timestamp per
#    partition, which Kafka ignores since 0.10.1) into v2; the answers are v2's layout.

def _offset_commit(version: int) -> Callable[[_Reader], dict]:
    def partition(r: _Reader) -> dict:
        index, offset = r.int32(), r.int64()
        if version == 1:
            r.int64()  # commit_timestamp
        return dict(partition_index=index, committed_offset=offset, committed_metadata=r.string(nullable=True))

    def decode(r: _Reader) -> dict:
        group_id = r.string()
        generation, member_id = (r.int32(), r.string()) if version == 1 else (-1, "")
        topics = r.array(lambda r: dict(name=r.string(), partitions=r.array(partition, 14)), 6)
        return dict(group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
                    retention_time=-1, topics=topics)

    return decode


# -- ListOffsets v0: max_num_offsets per partition, and a list of offsets in the answer.

def _list_offsets_v0(r: _Reader) -> dict:
    def partition(r: _Reader) -> dict:
        index, timestamp = r.int32(), r.int64()
        r.int32()  # max_num_offsets: one offset is answered, as for v1
        return dict(partition_index=index, timestamp=timestamp)

    replica_id = r.int32()
    return dict(replica_id=replica_id, topics=r.array(lambda r: dict(name=r.string(), partitions=r.array(partition, 16)), 6))


def _list_offsets_v0_answer(body: Any) -> bytes:
    w = _Writer()

    def partition(p: Any) -> None:
        w.int32(p.partition_index)
        w.int16(p.error_code)
        offsets = [p.offset] if p.error_code == 0 and p.offset >= 0 else []
        w.array(offsets, w.int64)

    w.topics(body.topics, "name", partition)
    return w.getvalue()


# -- CreateTopics v0 (no validate_only) and v1 into v2; answers without throttle time
#    (v0 also without error messages).

def _create_topics_v0(r: _Reader) -> dict:
    def topic(r: _Reader) -> dict:
        return dict(
            name=r.string(), num_partitions=r.int32(), replication_factor=r.int16(),
            assignments=r.array(lambda r: dict(partition_index=r.int32(), broker_ids=r.array(_Reader.int32, 4)), 8),
            configs=r.array(lambda r: dict(name=r.string(), value=r.string(nullable=True)), 4),
        )

    topics = r.array(topic, 16)
    return dict(topics=topics, timeout=r.int32(), validate_only=False)


def _names_and_errors(topics, *, with_message: bool) -> bytes:
    """CreateTopics v0–1 and DeleteTopics v0 answers: per topic its name, error (and message)."""
    w = _Writer()

    def topic(t: Any) -> None:
        w.string(t.name)
        w.int16(t.error_code)
        if with_message:
            w.string(t.error_message)

    w.array(topics, topic)
    return w.getvalue()


# -- DescribeConfigs v0: no include_synonyms; answers say is_default, not the source.

def _describe_configs_v0(r: _Reader) -> dict:
    def resource(r: _Reader) -> dict:
        return dict(resource_type=r.int8(), resource_name=r.string(),
                    configuration_keys=r.array(_Reader.string, 2, nullable=True))

    return dict(resources=r.array(resource, 7), include_synonyms=False)


def _describe_configs_v0_answer(body: Any) -> bytes:
    w = _Writer()

    def config(c: Any) -> None:
        w.string(c.name)
        w.string(c.value)
        w.boolean(c.read_only)
        w.boolean(c.config_source == _CONFIG_SOURCE_DEFAULT)
        w.boolean(c.is_sensitive)

    def result(res: Any) -> None:
        w.int16(res.error_code)
        w.string(res.error_message)
        w.int8(res.resource_type)
        w.string(res.resource_name)
        w.array(res.configs, config)

    w.int32(_millis(body.throttle_time))
    w.array(body.results, result)
    return w.getvalue()


# -- OffsetForLeaderEpoch v0-1: no current_leader_epoch; answers without throttle time
#    (v0 also without the leader epoch).

def _offset_for_leader_epoch(r: _Reader) -> dict:
    def partition(r: _Reader) -> dict:
        return dict(partition=r.int32(), current_leader_epoch=-1, leader_epoch=r.int32())

    return dict(topics=r.array(lambda r: dict(topic=r.string(), partitions=r.array(partition, 8)), 6))


def _offset_for_leader_epoch_answer(version: int) -> Callable[[Any], bytes]:
    def encode(body: Any) -> bytes:
        w = _Writer()

        def partition(p: Any) -> None:
            w.int16(p.error_code)
            w.int32(p.partition)
            if version >= 1:
                w.int32(p.leader_epoch)
            w.int64(p.end_offset)

        w.topics(body.topics, "topic", partition)
        return w.getvalue()

    return encode


@dataclass(frozen=True, slots=True)
class Legacy:
    target: int  # the kio version handlers see
    decode: Callable[[_Reader], dict] | None = None  # None: the target's request layout
    encode: Callable[[Any], bytes] | None = None  # None: the target's answer layout

    def decode_body(self, frame: bytes, pos: int) -> tuple[dict, int]:
        """The request's values (for the target's class) and where its body ends."""
        assert self.decode is not None
        reader = _Reader(frame, pos)
        return self.decode(reader), reader.pos


LEGACY_VERSIONS: dict[tuple[int, int], Legacy] = {
    (ApiKey.OFFSET_COMMIT, 0): Legacy(2, _offset_commit(0)),
    (ApiKey.OFFSET_COMMIT, 1): Legacy(2, _offset_commit(1)),
    (ApiKey.OFFSET_FETCH, 0): Legacy(1),  # v0 read ZooKeeper offsets; the layout is v1's
    (ApiKey.LIST_OFFSETS, 0): Legacy(1, _list_offsets_v0, _list_offsets_v0_answer),
    (ApiKey.CREATE_TOPICS, 0): Legacy(2, _create_topics_v0, lambda b: _names_and_errors(b.topics, with_message=False)),
    (ApiKey.CREATE_TOPICS, 1): Legacy(2, None, lambda b: _names_and_errors(b.topics, with_message=True)),
    # DeleteTopics v0: v1's request; the answer has no throttle time.
    (ApiKey.DELETE_TOPICS, 0): Legacy(1, None, lambda b: _names_and_errors(b.responses, with_message=False)),
    (ApiKey.DESCRIBE_CONFIGS, 0): Legacy(1, _describe_configs_v0, _describe_configs_v0_answer),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): Legacy(2, _offset_for_leader_epoch, _offset_for_leader_epoch_answer(0)),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): Legacy(2, _offset_for_leader_epoch, _offset_for_leader_epoch_answer(1)),
    (ApiKey.ALTER_REPLICA_LOG_DIRS, 0): Legacy(1),
    (ApiKey.DESCRIBE_LOG_DIRS, 0): Legacy(1),
}


def legacy(api_key: int, api_version: int) -> Legacy | None:
    return LEGACY_VERSIONS.get((api_key, api_version))


def target_version(api_key: int, api_version: int) -> int:
    """The kio version a request of ``api_version`` is decoded and answered as."""
    found = LEGACY_VERSIONS.get((api_key, api_version))
    return found.target if found is not None else api_version
