"""Varints (sans-io, pure Python): zig-zag ones as used inside Kafka v2 records, and the
unsigned ones of flexible protocol versions (compact lengths, tagged fields)."""

from __future__ import annotations

from .errors import CorruptBatch

__all__ = ["read_varint", "write_varint", "varint_size", "write_uvarint"]


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint (up to 64 bits); returns ``(value, next_pos)``."""
    try:
        byte = data[pos]
    except IndexError:
        raise CorruptBatch("truncated varint") from None
    if byte < 0x80:  # the common one-byte case, kept branch-light
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        try:
            byte = data[pos]
        except IndexError:
            raise CorruptBatch("truncated varint") from None
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptBatch("varint longer than 10 bytes")


def write_varint(value: int, out: bytearray) -> None:
    encoded = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)


def varint_size(value: int) -> int:
    encoded = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while encoded >= 0x80:
        encoded >>= 7
        size += 1
    return size


def write_uvarint(value: int, out: bytearray) -> None:
    """An unsigned varint (``value`` >= 0), as flexible protocol versions write lengths."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
