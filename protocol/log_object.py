"""The shared log object: one gateway flush, the batches of every partition it wrote.

A gateway (a *writer*) numbers its log objects 0, 1, 2… and creates each with
put-if-absent at ``~log/{writer}/{seq:020d}.kfl`` (see :mod:`.layout`), strictly
one after the other. The same numbered slot may instead hold a *seal*, written by
another gateway taking partitions over: it names partitions (or all of them) that
the writer may no longer write. A writer whose next slot is taken reads it, drops
what is sealed, and goes on at the next slot, so nothing it writes after a seal
holds a sealed partition (docs/formats.md, "Commit and fencing").

::

    header (32 bytes, big-endian)
      0  magic          4  b"KFLO"
      4  version        2  1
      6  kind           2  0 = data, 1 = seal
      8  sequence       8  the writer's slot number
      16 created_ms     8  wall-clock time of the flush
      24 entry_count    4
      28 flags          4  bit 0 (seal): every partition is sealed
    body: for each entry, its partition's Kafka v2 batches, byte-exact, offsets absolute
    directory: a copy of the header; topic count u32 and per topic its name (u16 length,
               UTF-8) and its 16-byte topic id; then one 60-byte record per entry
    footer (24 bytes)
      0  directory_pos  8  where the directory starts
      8  directory_len  4
      12 directory_crc  4  CRC-32C of the directory
      16 reserved       4  0
      20 magic          4  b"KFL!"

    entry: topic index u32, partition i32, base offset i64, last offset i64,
           position u64, length u32, batch count u32, record count u32,
           max timestamp i64, crc32c u32 (of the entry's bytes), leader epoch i32

Reading a directory costs one ranged GET of the object's tail (two if the
directory is larger than the tail read); an entry's bytes are one ranged GET,
checked against the entry's CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from .errors import CorruptBatch, SegmentFormatError
from .records import BatchHeader, record_set_crc, split_batches

__all__ = [
    "LOG_OBJECT_HEADER_SIZE",
    "LOG_OBJECT_FOOTER_SIZE",
    "DIRECTORY_TAIL_BYTES",
    "KIND_DATA",
    "KIND_SEAL",
    "LogEntry",
    "LogObjectDirectory",
    "LogObjectBuilder",
    "EntryBatches",
    "encode_seal",
    "parse_directory",
    "directory_span",
    "tail_start",
    "directory_from_tail",
    "read_entry",
]

MAGIC = b"KFLO"
FOOTER_MAGIC = b"KFL!"
VERSION = 1
KIND_DATA = 0
KIND_SEAL = 1
FLAG_SEAL_ALL = 1
LOG_OBJECT_HEADER_SIZE = 32
LOG_OBJECT_FOOTER_SIZE = 24
# Bytes read from an object's end to get its directory in one request, most of the time.
DIRECTORY_TAIL_BYTES = 64 * 1024
_HEADER = struct.Struct(">4sHHqqII")
_FOOTER = struct.Struct(">QIII4s")
_ENTRY = struct.Struct(">IiqqQIIIqIi")
_COUNT = struct.Struct(">I")
_NAME = struct.Struct(">H")


class LogEntry(NamedTuple):
    """One partition's run of batches in a log object (a named tuple: one is made per entry
    written or indexed, and tuples of plain values drop out of the cyclic collector's sight)."""

    key: str  # the log object
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    position: int
    length: int
    batch_count: int
    record_count: int
    max_timestamp: int
    crc: int
    leader_epoch: int = 0
    topic_id: bytes = bytes(16)  # a topic deleted and created again has a new id


@dataclass(frozen=True, slots=True)
class LogObjectDirectory:
    key: str
    sequence: int
    kind: int
    created_ms: int
    entries: tuple[LogEntry, ...]
    seals_all: bool = False

    @property
    def is_seal(self) -> bool:
        return self.kind == KIND_SEAL

    def sealed(self) -> set[tuple[str, int]]:
        """Partitions a seal names (empty for data objects)."""
        if not self.is_seal:
            return set()
        return {(entry.topic, entry.partition) for entry in self.entries}


@dataclass(frozen=True, slots=True)
class EntryBatches:
    """A piece's bytes split into batches (positions relative to ``data``). A damaged piece
    holds only its intact batches; ``damaged`` names the offset ranges it cannot serve."""

    data: bytes | bytearray
    batches: list[BatchHeader]
    damaged: tuple[tuple[int, int], ...] = ()

    def batch_bytes(self, header: BatchHeader) -> memoryview:
        return memoryview(self.data)[header.position : header.position + header.size]

    @property
    def gaps(self) -> bool:
        return False  # log objects hold what producers sent: every offset of their range


@dataclass(slots=True)
class _Pending:
    topic: str
    partition: int
    leader_epoch: int
    topic_id: bytes
    record_sets: list[tuple[bytes | bytearray | memoryview, list[BatchHeader]]] = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        return self.record_sets[-1][1][-1].last_offset + 1


class LogObjectBuilder:
    """Collects stamped batches per partition and encodes them as one log object."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], _Pending] = {}
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, topic: str, partition: int, record_set: bytes | bytearray | memoryview,
               headers: list[BatchHeader], leader_epoch: int = 0, topic_id: bytes = bytes(16)) -> None:
        """Add a stamped record set (``headers``, its batches as they read now, CRCs checked,
        positioned within it). Offsets of one partition must continue from its previous append."""
        pending = self._entries.get((topic, partition))
        if pending is None:
            pending = self._entries[(topic, partition)] = _Pending(topic, partition, leader_epoch, topic_id)
        elif headers[0].base_offset != pending.next_offset:
            raise ValueError(f"{topic}-{partition}: offset {headers[0].base_offset} does not continue "
                             f"at {pending.next_offset}")
        pending.record_sets.append((record_set, headers))
        self.size += len(record_set)

    def encode(self, key: str, sequence: int, created_ms: int) -> tuple[bytes, LogObjectDirectory]:
        pieces, directory = self.encode_pieces(key, sequence, created_ms)
        return b"".join(pieces), directory

    def encode_pieces(self, key: str, sequence: int, created_ms: int
                      ) -> tuple[list[bytes | bytearray | memoryview], LogObjectDirectory]:
        """The object as its pieces in order (header, the record sets as appended, directory,
        footer), for a store that writes them without joining them first."""
        topics: dict[tuple[str, bytes], int] = {}
        body: list[bytes | bytearray | memoryview] = []
        entries: list[LogEntry] = []
        position = LOG_OBJECT_HEADER_SIZE
        for (topic, partition), pending in self._entries.items():
            topics.setdefault((topic, pending.topic_id), len(topics))
            crc = 0
            length = 0
            headers: list[BatchHeader] = []
            for record_set, stamped in pending.record_sets:
                crc = record_set_crc(record_set, stamped, crc)
                length += len(record_set)
                body.append(record_set)
                headers.extend(stamped)
            entries.append(LogEntry(
                key, topic, partition, headers[0].base_offset, headers[-1].last_offset, position, length,
                len(headers), sum(h.records_count for h in headers), max(h.max_timestamp for h in headers), crc,
                pending.leader_epoch, pending.topic_id))
            position += length
        return _assemble(key, KIND_DATA, sequence, created_ms, 0, topics, entries, body, position)


def encode_seal(key: str, sequence: int, created_ms: int, partitions: set[tuple[str, int]],
                *, seal_all: bool = False) -> tuple[bytes, LogObjectDirectory]:
    """A seal for slot ``sequence`` of a writer: it may no longer write ``partitions`` (or any)."""
    topics: dict[tuple[str, bytes], int] = {}
    entries = []
    for topic, partition in sorted(partitions):
        topics.setdefault((topic, bytes(16)), len(topics))
        entries.append(LogEntry(key, topic, partition, -1, -1, 0, 0, 0, 0, -1, 0))
    flags = FLAG_SEAL_ALL if seal_all else 0
    pieces, directory = _assemble(key, KIND_SEAL, sequence, created_ms, flags, topics, entries, [],
                                  LOG_OBJECT_HEADER_SIZE)
    return b"".join(pieces), directory


def _assemble(key: str, kind: int, sequence: int, created_ms: int, flags: int, topics: dict[tuple[str, bytes], int],
              entries: list[LogEntry], body: list, directory_pos: int
              ) -> tuple[list[bytes | bytearray | memoryview], LogObjectDirectory]:
    header = _HEADER.pack(MAGIC, VERSION, kind, sequence, created_ms, len(entries), flags)
    directory = bytearray(header + _COUNT.pack(len(topics)))
    for name, topic_id in topics:
        encoded = name.encode()
        directory += _NAME.pack(len(encoded)) + encoded + topic_id
    for entry in entries:
        directory += _ENTRY.pack(
            topics[(entry.topic, entry.topic_id)], entry.partition, entry.base_offset, entry.last_offset, entry.position,
            entry.length, entry.batch_count, entry.record_count, entry.max_timestamp, entry.crc,
            entry.leader_epoch)
    crc = crc32c(directory)
    footer = _FOOTER.pack(directory_pos, len(directory), crc, 0, FOOTER_MAGIC)
    return [header, *body, directory, footer], LogObjectDirectory(key, sequence, kind, created_ms, tuple(entries),
                                                                bool(flags & FLAG_SEAL_ALL))


def directory_span(size: int, tail: bytes) -> tuple[int, int]:
    """From the last bytes of an object of ``size`` bytes: the byte range [start, end) that
    ``parse_directory`` needs (from the directory to the end)."""
    if size < LOG_OBJECT_HEADER_SIZE + LOG_OBJECT_FOOTER_SIZE or len(tail) < LOG_OBJECT_FOOTER_SIZE:
        raise SegmentFormatError(f"log object of {size} bytes is truncated")
    position, length, _, _, magic = _FOOTER.unpack_from(tail, len(tail) - LOG_OBJECT_FOOTER_SIZE)
    if magic != FOOTER_MAGIC:
        raise SegmentFormatError("log object footer magic missing: torn or partial object")
    if position < LOG_OBJECT_HEADER_SIZE or position + length + LOG_OBJECT_FOOTER_SIZE != size:
        raise SegmentFormatError(f"log object directory at {position}+{length} does not fit {size} bytes")
    return position, size


def tail_start(size: int) -> int:
    """Where to start the one ranged read that usually holds an object's whole directory."""
    return max(0, size - DIRECTORY_TAIL_BYTES)


def directory_from_tail(key: str, size: int, tail: bytes) -> LogObjectDirectory | int:
    """The directory, from the bytes ``[tail_start(size), size)``; or, when the directory
    starts before them, the position to read from (then ``parse_directory`` of that read)."""
    start = tail_start(size)
    if len(tail) != size - start:
        raise SegmentFormatError(f"{key}: {len(tail)} bytes read of {size - start}")
    position, _ = directory_span(size, tail)
    if position < start:
        return position
    return parse_directory(key, tail[position - start:])


def parse_directory(key: str, tail: bytes) -> LogObjectDirectory:
    """Check and decode a log object's directory from its bytes from the directory's start
    to the end (``tail``)."""
    if len(tail) < LOG_OBJECT_HEADER_SIZE + LOG_OBJECT_FOOTER_SIZE:
        raise SegmentFormatError(f"log object {key} is truncated")
    position, length, crc, _, footer_magic = _FOOTER.unpack_from(tail, len(tail) - LOG_OBJECT_FOOTER_SIZE)
    if footer_magic != FOOTER_MAGIC or length != len(tail) - LOG_OBJECT_FOOTER_SIZE:
        raise SegmentFormatError(f"{key}: torn or partial log object")
    directory = memoryview(tail)[:length]
    if crc32c(directory) != crc:
        raise SegmentFormatError(f"{key}: log object directory CRC mismatch")
    magic, version, kind, sequence, created_ms, count, flags = _HEADER.unpack_from(directory, 0)
    if magic != MAGIC:
        raise SegmentFormatError(f"{key}: bad log object magic {bytes(magic)!r}")
    if version != VERSION:
        raise SegmentFormatError(f"{key}: unsupported log object version {version}")
    if kind not in (KIND_DATA, KIND_SEAL):
        raise SegmentFormatError(f"{key}: unknown log object kind {kind}")
    try:
        (topic_count,) = _COUNT.unpack_from(directory, LOG_OBJECT_HEADER_SIZE)
        at = LOG_OBJECT_HEADER_SIZE + _COUNT.size
        names = []
        for _ in range(topic_count):
            (size,) = _NAME.unpack_from(directory, at)
            at += _NAME.size
            names.append((bytes(directory[at : at + size]).decode(), bytes(directory[at + size : at + size + 16])))
            at += size + 16
        if at + count * _ENTRY.size != length:
            raise SegmentFormatError(f"{key}: directory of {length} bytes does not hold {count} entries")
        entries = []
        for _ in range(count):
            (topic, partition, base, last, entry_pos, entry_len, batches, records, max_ts, entry_crc,
             epoch) = _ENTRY.unpack_from(directory, at)
            at += _ENTRY.size
            if kind == KIND_DATA and (entry_pos < LOG_OBJECT_HEADER_SIZE or entry_pos + entry_len > position
                                      or last < base or base < 0):
                raise SegmentFormatError(f"{key}: entry {names[topic][0]}-{partition} lies outside the body")
            name, topic_id = names[topic]
            entries.append(LogEntry(key, name, partition, base, last, entry_pos, entry_len, batches,
                                    records, max_ts, entry_crc, epoch, topic_id))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise SegmentFormatError(f"{key}: malformed log object directory: {exc}") from exc
    return LogObjectDirectory(key, sequence, kind, created_ms, tuple(entries), bool(flags & FLAG_SEAL_ALL))


def read_entry(entry: LogEntry, data: bytes) -> EntryBatches:
    """Check an entry's bytes (read with one ranged GET) and split them into batches."""
    if len(data) != entry.length or crc32c(data) != entry.crc:
        raise SegmentFormatError(f"{entry.key}: entry {entry.topic}-{entry.partition} fails its CRC")
    try:
        batches = split_batches(data, check_crc=False)  # the entry's CRC, checked above, covers every byte
    except CorruptBatch as exc:
        raise SegmentFormatError(f"{entry.key}: entry is not a sequence of batches: {exc}") from exc
    if (len(batches) != entry.batch_count or not batches or batches[0].base_offset != entry.base_offset
            or batches[-1].last_offset != entry.last_offset):
        raise SegmentFormatError(f"{entry.key}: entry {entry.topic}-{entry.partition} disagrees with its directory")
    return EntryBatches(data, batches)
