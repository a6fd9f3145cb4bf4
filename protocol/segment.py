"""The Kafscale segment object: a header, the stored Kafka v2 batches byte-exact, a footer.

::

    header (32 bytes, big-endian)
      0  magic          4  b"KAFS"
      4  version        2  1
      6  flags          2  bit 0 GAPS: the cleaner removed records (compacted topics), so
                           batches may skip offsets and the segment may hold none; other
                           bits 0 (compression is per batch, in each batch's attributes)
      8  base_offset    8  offset of the first record
      16 record_count   4  records in the segment
      20 created_ms     8  wall-clock time the segment was sealed
      28 batch_count    4  batches in the segment (the spec's "reserved")
    batches: Kafka RecordBatch v2, base offsets absolute, CRCs untouched
    footer (16 bytes)
      0  crc32c         4  CRC-32C of the header and all batch bytes
      4  last_offset    8  offset of the last record
      12 magic          4  b"END!"

Without GAPS the batches run without a gap from the base offset to the footer's last
offset; with GAPS they ascend within that range. Either way the segment answers for
every offset from its base (its key) to its last: an offset in a gap was cleaned away.

A reader trusts nothing it has not checked: a torn or partial object (no
footer, wrong sizes, CRC mismatch) raises :class:`SegmentFormatError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from .errors import CorruptBatch, SegmentFormatError
from .records import BatchHeader, split_batches

__all__ = [
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_FOOTER_SIZE",
    "SegmentHeader",
    "SegmentFooter",
    "SegmentBuilder",
    "Segment",
    "segment_body_end",
    "parse_segment_header",
    "segment_has_gaps",
    "parse_segment_footer",
    "read_segment",
    "segment_last",
    "GAPS",
]

SEGMENT_MAGIC = b"KAFS"
FOOTER_MAGIC = b"END!"
SEGMENT_VERSION = 1
SEGMENT_HEADER_SIZE = 32
SEGMENT_FOOTER_SIZE = 16
_HEADER = struct.Struct(">4sHHqIqI")
GAPS = 0x0001
_KNOWN_FLAGS = GAPS
_FOOTER = struct.Struct(">Iq4s")


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    base_offset: int
    record_count: int
    created_ms: int
    batch_count: int
    version: int = SEGMENT_VERSION
    flags: int = 0

    def encode(self) -> bytes:
        return _HEADER.pack(
            SEGMENT_MAGIC,
            self.version,
            self.flags,
            self.base_offset,
            self.record_count,
            self.created_ms,
            self.batch_count,
        )


@dataclass(frozen=True, slots=True)
class SegmentFooter:
    crc: int
    last_offset: int

    def encode(self) -> bytes:
        return _FOOTER.pack(self.crc, self.last_offset, FOOTER_MAGIC)


def parse_segment_header(data: bytes | memoryview) -> SegmentHeader:
    if len(data) < SEGMENT_HEADER_SIZE:
        raise SegmentFormatError(f"segment header truncated ({len(data)} of 32 bytes)")
    magic, version, flags, base_offset, record_count, created_ms, batch_count = _HEADER.unpack_from(
        data, 0
    )
    if magic != SEGMENT_MAGIC:
        raise SegmentFormatError(f"bad segment magic {bytes(magic)!r}")
    if version != SEGMENT_VERSION:
        raise SegmentFormatError(f"unsupported segment version {version}")
    if base_offset < 0:
        raise SegmentFormatError(f"negative segment base offset {base_offset}")
    if flags & ~_KNOWN_FLAGS:
        raise SegmentFormatError(f"unknown segment flags {flags:#06x}")
    return SegmentHeader(base_offset, record_count, created_ms, batch_count, version, flags)


def segment_has_gaps(data: bytes | memoryview) -> bool:
    """Whether a (possibly torn) segment says it was cleaned; False if its header is unreadable,
    so a walk of its batches never takes an offset jump for a cleaned gap it cannot vouch for."""
    try:
        return bool(parse_segment_header(data).flags & GAPS)
    except SegmentFormatError:
        return False


def parse_segment_footer(data: bytes | memoryview) -> SegmentFooter:
    """Parse the last 16 bytes of a segment object."""
    if len(data) < SEGMENT_FOOTER_SIZE:
        raise SegmentFormatError(f"segment footer truncated ({len(data)} of 16 bytes)")
    crc, last_offset, magic = _FOOTER.unpack_from(data, len(data) - SEGMENT_FOOTER_SIZE)
    if magic != FOOTER_MAGIC:
        raise SegmentFormatError("segment footer magic missing: torn or partial object")
    return SegmentFooter(crc, last_offset)


class SegmentBuilder:
    """Accumulates already-stamped batches and seals them into one segment object.

    Batches are copied into one buffer as they come, so a caller can drop what it
    appended from (compaction reads one entry at a time): building a segment holds
    the segment once, not its parts and then the joined object. :meth:`skip_to` passes
    over offsets the cleaner removed; the sealed segment is then flagged GAPS.
    """

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.next_offset = base_offset
        self.record_count = 0
        self._buffer = bytearray(SEGMENT_HEADER_SIZE)  # the header is written at seal
        self.batches: list[BatchHeader] = []  # positions are absolute in the object
        self.gaps = False

    @property
    def body_size(self) -> int:
        return len(self._buffer) - SEGMENT_HEADER_SIZE

    @property
    def object_size(self) -> int:
        return len(self._buffer) + SEGMENT_FOOTER_SIZE

    def append(self, record_set: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Append a stamped record set whose batches are ``headers`` (positions relative
        to the record set). Offsets must continue exactly from the last append."""
        position = len(self._buffer)
        next_offset = self.next_offset
        for header in headers:
            if header.base_offset != next_offset:
                raise ValueError(f"batch base offset {header.base_offset} does not continue at {next_offset}")
            next_offset = header.last_offset + 1
        for header in headers:
            self.record_count += header.records_count
            self.batches.append(_moved(header, position + header.position))
        self.next_offset = next_offset
        self._buffer += record_set

    def skip_to(self, offset: int) -> None:
        """The offsets up to ``offset`` hold nothing (cleaned away); the next batch starts
        there or later."""
        if offset > self.next_offset:
            self.next_offset = offset
            self.gaps = True

    def seal(self, created_ms: int) -> bytearray:
        """The whole object (the builder's own buffer: append nothing after)."""
        if self.next_offset == self.base_offset:
            raise ValueError("an empty segment cannot be sealed")
        header = SegmentHeader(self.base_offset, self.record_count, created_ms, len(self.batches),
                               flags=GAPS if self.gaps else 0).encode()
        self._buffer[:SEGMENT_HEADER_SIZE] = header
        # The CRC covers the header too, so no bit of the object goes unchecked.
        self._buffer += SegmentFooter(crc32c(self._buffer), self.next_offset - 1).encode()
        return self._buffer


def _moved(header: BatchHeader, position: int) -> BatchHeader:
    return header.at(position=position)


@dataclass(frozen=True, slots=True)
class Segment:
    header: SegmentHeader
    footer: SegmentFooter
    data: bytes | bytearray | memoryview  # the whole object
    batches: list[BatchHeader]  # positions absolute in ``data``

    @property
    def damaged(self) -> tuple[tuple[int, int], ...]:
        return ()  # a Segment passed every check

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def gaps(self) -> bool:
        """Whether offsets between its base and last may hold nothing (cleaned away)."""
        return bool(self.header.flags & GAPS)

    @property
    def last_offset(self) -> int:
        return self.footer.last_offset

    def batch_bytes(self, header: BatchHeader) -> memoryview:
        return memoryview(self.data)[header.position : header.position + header.size]


def read_segment(data: bytes | memoryview) -> Segment:
    """Fully validate a whole segment object."""
    if len(data) < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        raise SegmentFormatError(f"segment object of {len(data)} bytes is truncated")
    header = parse_segment_header(data)
    footer = parse_segment_footer(data)
    if crc32c(memoryview(data)[: len(data) - SEGMENT_FOOTER_SIZE]) != footer.crc:
        raise SegmentFormatError("segment CRC mismatch")
    body = memoryview(data)[SEGMENT_HEADER_SIZE : len(data) - SEGMENT_FOOTER_SIZE]
    try:
        batches = split_batches(body, check_crc=False)  # the segment's CRC, checked above, covers every byte
    except CorruptBatch as exc:
        raise SegmentFormatError(f"segment body is not a sequence of batches: {exc}") from exc
    if len(batches) != header.batch_count:
        raise SegmentFormatError(
            f"segment holds {len(batches)} batches, its header says {header.batch_count}"
        )
    gaps = bool(header.flags & GAPS)
    if not batches and not gaps:
        raise SegmentFormatError("segment holds no batches")
    expected = header.base_offset
    records = 0
    for batch in batches:
        if batch.base_offset != expected and not (gaps and batch.base_offset > expected):
            raise SegmentFormatError(
                f"batch at {batch.position} starts at offset {batch.base_offset}, expected {expected}"
            )
        expected = batch.last_offset + 1
        records += batch.records_count
    if gaps and expected - 1 <= footer.last_offset:
        expected = footer.last_offset + 1  # cleaned away up to the end
    if expected - 1 != footer.last_offset:
        raise SegmentFormatError(
            f"footer last offset {footer.last_offset} disagrees with the batches ({expected - 1})"
        )
    if records != header.record_count:
        raise SegmentFormatError(
            f"segment holds {records} records, its header says {header.record_count}"
        )
    absolute = [_moved(batch, batch.position + SEGMENT_HEADER_SIZE) for batch in batches]
    return Segment(header, footer, data, absolute)


def segment_body_end(data: bytes | bytearray) -> int:
    """Where a segment's batches end: before its footer, or at its end if the footer is gone."""
    if len(data) < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return len(data)
    try:
        parse_segment_footer(memoryview(data)[len(data) - SEGMENT_FOOTER_SIZE:])
    except SegmentFormatError:
        return len(data)
    return len(data) - SEGMENT_FOOTER_SIZE


def segment_last(base_offset: int, size: int, tail: bytes) -> int | None:
    """A segment's last offset from its last ``SEGMENT_FOOTER_SIZE`` bytes (one ranged read,
    the base offset being in its key); ``None`` for a torn or partial object (never
    acknowledged)."""
    if size < SEGMENT_HEADER_SIZE + SEGMENT_FOOTER_SIZE:
        return None
    try:
        footer = parse_segment_footer(tail)
    except SegmentFormatError:
        return None
    return footer.last_offset if footer.last_offset >= base_offset else None
