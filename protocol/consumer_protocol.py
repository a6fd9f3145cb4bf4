"""The consumer's embedded protocol (Kafka's ConsumerProtocol), sans-io: the subscription a
classic member sends in JoinGroup's metadata and the assignment it receives in SyncGroup,
each a version (int16) then that version's body. The group coordinator reads and writes
them only when it hosts classic members in a consumer-protocol group (KIP-848's online
migration); otherwise they are the members' own business.

A newer version than kio knows is read as the newest it knows: Kafka's readers do the same,
each version only adding fields at the end.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

__all__ = ["Subscription", "decode_subscription", "decode_assignment", "encode_assignment"]

_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS = (subscription_v0.ConsumerProtocolSubscription, subscription_v1.ConsumerProtocolSubscription,
                  subscription_v2.ConsumerProtocolSubscription, subscription_v3.ConsumerProtocolSubscription)
_ASSIGNMENT = assignment_v3.ConsumerProtocolAssignment  # v1-v3 add nothing a reader here uses


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]] | None  # None: version 0 says nothing of what it owns
    rack: str | None = None


@cache
def _reader(entity: Any):
    return entity_reader(entity)


def _read(data: bytes, entities: tuple) -> tuple[int, Any]:
    if len(data) < _VERSION.size:
        raise ValueError("no consumer protocol version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ValueError(f"consumer protocol version {version}")
    entity = entities[min(version, len(entities) - 1)]
    try:
        body, _ = _reader(entity)(memoryview(data)[_VERSION.size:], 0)
    except Exception as exc:  # kio's readers raise whatever a truncated or absurd field causes
        raise ValueError(f"unreadable consumer protocol {entity.__name__} v{version}: {exc!r}") from exc
    return version, body


def decode_subscription(data: bytes) -> Subscription:
    """A JoinGroup protocol's metadata; ``ValueError`` if it is not a consumer subscription."""
    version, body = _read(data, _SUBSCRIPTIONS)
    owned: dict[str, frozenset[int]] | None = None
    if version >= 1:
        owned = {}
        for item in body.owned_partitions:
            owned[item.topic] = owned.get(item.topic, frozenset()) | frozenset(item.partitions)
    return Subscription(tuple(body.topics), owned, getattr(body, "rack_id", None))


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """A SyncGroup assignment's partitions; empty for no bytes (a member given nothing)."""
    if not data:
        return {}
    _, body = _read(data, (assignment_v0.ConsumerProtocolAssignment, _ASSIGNMENT))
    assigned: dict[str, frozenset[int]] = {}
    for item in body.assigned_partitions:
        assigned[item.topic] = assigned.get(item.topic, frozenset()) | frozenset(item.partitions)
    return assigned


@cache
def _writer():
    return entity_writer(assignment_v0.ConsumerProtocolAssignment)


def encode_assignment(assigned: Mapping[str, Iterable[int]]) -> bytes:
    """Version 0, which every consumer reads (later versions add nothing the coordinator sets)."""
    partition = assignment_v0.TopicPartition
    body = assignment_v0.ConsumerProtocolAssignment(
        assigned_partitions=tuple(partition(topic=TopicName(topic), partitions=tuple(i32(p) for p in sorted(partitions)))
                                  for topic, partitions in sorted(assigned.items())), user_data=None)
    out = io.BytesIO()
    out.write(_VERSION.pack(0))
    _writer()(out, body)
    return out.getvalue()
