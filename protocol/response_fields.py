"""Kafka's primitive fields, written by hand into a bytearray (sans-io): what the answers
encoded without kio (Fetch, Produce) are made of."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from .varint import write_uvarint

__all__ = ["Buffer", "Endpoint", "write_length", "write_string", "write_tagged_field", "write_leader",
           "write_endpoints"]

Buffer = bytes | bytearray | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_LEADER = struct.Struct(">ii")  # leader_id, leader_epoch


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A broker named in a NOT_LEADER_OR_FOLLOWER answer (KIP-951: Produce v10+, Fetch v16+)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def write_length(out: bytearray, count: int, flexible: bool, wide: bool = False) -> None:
    """An array count or string/bytes length; ``wide`` for Kafka's int32 lengths (arrays,
    bytes) rather than int16 (strings)."""
    if flexible:
        write_uvarint(count + 1, out)
    elif wide:
        out += _I32.pack(count)
    else:
        out += _I16.pack(count)


def write_string(out: bytearray, text: str | None, flexible: bool) -> None:
    """A (nullable) string."""
    if text is None:
        out += b"\x00" if flexible else _I16.pack(-1)
        return
    raw = text.encode()
    write_length(out, len(raw), flexible)
    out += raw


def write_tagged_field(out: bytearray, tag: int, value: bytes | bytearray) -> None:
    """A field list of one tagged field (kio leaves fields at their defaults out)."""
    out.append(1)
    write_uvarint(tag, out)
    write_uvarint(len(value), out)
    out += value


def write_leader(out: bytearray, tag: int, leader: tuple[int, int] | None) -> None:
    """A partition's tagged fields: its current leader (KIP-951, with NOT_LEADER_OR_FOLLOWER)
    as ``tag``, or none when unknown."""
    if leader is None or leader == (-1, -1):
        out.append(0)
    else:
        write_tagged_field(out, tag, _LEADER.pack(*leader) + b"\x00")


def write_endpoints(out: bytearray, tag: int, endpoints: Sequence[Endpoint]) -> None:
    """A flexible answer's top-level tagged fields: the KIP-951 endpoints, if any, as ``tag``."""
    if not endpoints:
        out.append(0)
        return
    body = bytearray()
    write_uvarint(len(endpoints) + 1, body)
    for endpoint in endpoints:
        body += _I32.pack(endpoint.node_id)
        write_string(body, endpoint.host, True)
        body += _I32.pack(endpoint.port)
        write_string(body, endpoint.rack, True)
        body.append(0)
    write_tagged_field(out, tag, body)
