"""The log cleaner's record logic for compacted topics, sans-io (Kafka's log cleaner).

Cleaning keeps, for every key, only its newest record; offsets never change, so a
cleaned batch keeps its base offset, last offset delta and producer fields (its
records keep their offset deltas: the log gets gaps). The rules, per record:

- a record without a key goes (Kafka's cleaner drops them too);
- a record whose key has a newer record (the :class:`KeyMap` of the pass) goes;
- a tombstone (null value) stays until its batch's *delete horizon* has passed. The
  first pass that keeps a tombstone sets the horizon, now + ``delete.retention.ms``,
  in the batch as Kafka does (attribute bit 6, the base timestamp holds the horizon,
  each record's timestamp delta is rewritten so its timestamp is unchanged);
- a batch left without records goes, unless the caller keeps its header: the newest
  batch its producer has in the segment (so the idempotent producer's sequence
  survives cleaning), and the last batch of the log (so a consumer reading to the
  end reaches the high watermark; Kafka never cleans its active segment);
- a batch of an aborted transaction goes whole (it is never mapped either, so an
  aborted record never supersedes a committed one); control batches (transaction
  markers) stay as they are. The caller cleans only below the last stable offset.

Records that stay are copied byte for byte (only a timestamp delta changes when a
horizon is set); the batch is compressed again with its codec.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c

from .compression import XERIAL_MAGIC, Compression, compress, decompress
from .errors import CorruptBatch
from .records import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    LOG_APPEND_TIME_BIT,
    BatchHeader,
    read_varint,
    write_varint,
)

__all__ = ["KeyMap", "DictTable", "batch_records", "clean_batch", "CleanedBatch",
           "key_digest", "delete_horizon", "newest_batch_per_producer"]

_NativeTable: Any
try:  # the C table (protocol/_key_map.c): 24-byte slots, at most three quarters full
    from ._key_map import KeyMap as _NativeTable
except ImportError:  # pragma: no cover - the extension is optional, the dict is the reference
    _NativeTable = None
_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiibI")


def key_digest(key: bytes | memoryview) -> bytes:
    """16 bytes of BLAKE2b: keys of any size in fixed memory, collisions as unlikely as
    MD5's that Kafka's map relies on."""
    return hashlib.blake2b(key, digest_size=16).digest()


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), if a cleaning pass set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


@dataclass(frozen=True, slots=True)
class _Record:
    start: int  # where the record (its length varint) starts in the payload
    body: int  # where its attributes byte starts
    end: int
    timestamp_delta: int
    after_timestamp: int  # where the offset delta starts
    offset: int
    key: bytes | None
    tombstone: bool


def _payload(data: bytes | memoryview, header: BatchHeader) -> bytes:
    begin = header.position + BATCH_HEADER_SIZE
    raw = data[begin:header.position + header.size]
    return decompress(header.compression, raw) if header.compression else bytes(raw)


def batch_records(data: bytes | memoryview, header: BatchHeader) -> list[_Record]:
    """The records of one batch with where each lies in the (decompressed) payload."""
    payload = _payload(data, header)
    return _records(payload, header)


def _records(payload: bytes, header: BatchHeader) -> list[_Record]:
    records = []
    pos = 0
    try:
        for _ in range(header.records_count):
            start = pos
            length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 6 or end > len(payload):
                raise CorruptBatch(f"record length {length} runs past the batch")
            body = pos
            timestamp_delta, cursor = read_varint(payload, pos + 1)
            after_timestamp = cursor
            offset_delta, cursor = read_varint(payload, cursor)
            key_length, cursor = read_varint(payload, cursor)
            key = None
            if key_length >= 0:
                key = payload[cursor:cursor + key_length]
                cursor += key_length
            value_length, cursor = read_varint(payload, cursor)
            records.append(_Record(start, body, end, timestamp_delta, after_timestamp,
                                   header.base_offset + offset_delta, key, value_length < 0))
            pos = end
    except IndexError:
        raise CorruptBatch("a record runs past the end of the batch") from None
    if pos != len(payload):
        raise CorruptBatch(f"{len(payload) - pos} bytes after the last record of the batch")
    return records


class DictTable:
    """The reference table (and the fallback without the C extension): a dict of digests.
    Measured with tracemalloc over 200,000 keys: 133 B a key (a 16-byte digest is a 49 B
    bytes object, an offset a 32 B int, the rest the dict's slots), so 136 are budgeted."""

    BYTES_PER_KEY = 136

    def __init__(self, max_bytes: int) -> None:
        self._capacity = max(max_bytes // self.BYTES_PER_KEY, 1)
        self._newest: dict[bytes, int] = {}

    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        return len(self._newest)

    def put(self, digest: bytes, offset: int) -> bool:
        if digest not in self._newest and len(self._newest) >= self._capacity:
            return False
        self._newest[digest] = offset
        return True

    def get(self, digest: bytes) -> int:
        return self._newest.get(digest, -1)


class KeyMap:
    """Each key's newest offset in the part of the log a pass has read, within a memory
    budget (Kafka's dedupe buffer): a pass maps until it is full. The C table takes 32
    bytes a key at most (24-byte slots, at most three quarters full), the dict 136."""

    def __init__(self, budget_bytes: int, *, native: bool = True) -> None:
        self._table = _NativeTable(budget_bytes) if native and _NativeTable is not None else DictTable(budget_bytes)
        self.capacity: int = self._table.capacity()

    def __len__(self) -> int:
        return len(self._table)

    def add_batch(self, data: bytes | memoryview, header: BatchHeader, start: int = 0) -> int | None:
        """Map the batch's keyed records from offset ``start`` on: ``None`` once all are, else
        the offset of the first record the full map could not take (a pass cleans up to
        there, so a map smaller than one batch's keys still advances record by record).
        Control batches carry no user keys (and the caller skips aborted batches)."""
        if header.attributes & CONTROL_BIT:
            return None
        put = self._table.put
        for record in batch_records(data, header):
            if record.key is None or record.offset < start:
                continue
            if not put(key_digest(record.key), record.offset):
                return record.offset
        return None

    def superseded(self, key: bytes, offset: int) -> bool:
        return self._table.get(key_digest(key)) > offset


@dataclass(frozen=True, slots=True)
class CleanedBatch:
    """What cleaning made of one batch: ``data`` is ``None`` when the batch went."""

    data: bytes | memoryview | None
    changed: bool
    records_removed: int
    tombstone_horizon: int | None  # the horizon of tombstones kept, if any


def clean_batch(data: bytes | memoryview, header: BatchHeader, keys: KeyMap, now_ms: int,
                delete_retention_ms: int, *, keep_header: bool, aborted: bool = False) -> CleanedBatch:
    """Clean one stored batch (``header.position`` locates it in ``data``).
    ``keep_header``: if no record stays, the batch stays as an empty header; ``aborted``:
    the batch belongs to an aborted transaction, none of its records stays."""
    original = memoryview(data)[header.position:header.position + header.size]
    if header.attributes & CONTROL_BIT:
        return CleanedBatch(original, False, 0, None)
    payload = _payload(data, header)
    records = _records(payload, header)
    horizon = delete_horizon(header)
    kept: list[_Record] = []
    for record in records:
        if aborted or record.key is None or keys.superseded(record.key, record.offset):
            continue
        if record.tombstone and horizon is not None and horizon <= now_ms:
            continue
        kept.append(record)
    has_tombstones = any(record.tombstone for record in kept)
    new_horizon = horizon
    if has_tombstones and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    removed = len(records) - len(kept)
    if not removed and new_horizon == horizon:
        return CleanedBatch(original, False, 0, new_horizon if has_tombstones else None)
    if not kept:
        if keep_header:
            return CleanedBatch(_empty_batch(header), True, removed, None)
        return CleanedBatch(None, True, removed, None)
    xerial = header.compression == Compression.SNAPPY and bytes(original[BATCH_HEADER_SIZE:]).startswith(XERIAL_MAGIC)
    return CleanedBatch(_rebuild(header, payload, kept, new_horizon if has_tombstones else None, xerial), True, removed,
                         new_horizon if has_tombstones else None)


def _timestamp(header: BatchHeader, record: _Record) -> int:
    return header.base_timestamp + record.timestamp_delta


def _rebuild(header: BatchHeader, payload: bytes, kept: list[_Record], horizon: int | None,
             xerial: bool) -> bytes:
    body = bytearray()
    if horizon is None or horizon == delete_horizon(header):
        base_timestamp = header.base_timestamp
        for record in kept:
            body += payload[record.start:record.end]
    else:
        # The base timestamp becomes the horizon: each record's delta moves so its timestamp stays.
        base_timestamp = horizon
        for record in kept:
            rest = payload[record.after_timestamp:record.end]
            fields = bytearray(payload[record.body:record.body + 1])
            write_varint(_timestamp(header, record) - horizon, fields)
            fields += rest
            write_varint(len(fields), body)
            body += fields
    attributes = header.attributes | (DELETE_HORIZON_BIT if horizon is not None else 0)
    if header.attributes & LOG_APPEND_TIME_BIT:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(_timestamp(header, record) for record in kept)
    codec = header.compression
    compressed = compress(Compression(codec), bytes(body), xerial=xerial) if codec else bytes(body)
    return _encode(header, attributes, base_timestamp, max_timestamp, len(kept), compressed)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's empty batch: the header alone, uncompressed, its offsets still covered."""
    attributes = header.attributes & ~(CODEC_MASK | DELETE_HORIZON_BIT)
    return _encode(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _encode(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int,
            payload: bytes) -> bytes:
    after_crc = _AFTER_CRC.pack(attributes, header.last_offset_delta, base_timestamp, max_timestamp,
                                header.producer_id, header.producer_epoch, header.base_sequence, count) + payload
    return _BEFORE_CRC.pack(header.base_offset, 4 + 1 + 4 + len(after_crc), header.partition_leader_epoch, 2,
                            crc32c(after_crc)) + after_crc


def newest_batch_per_producer(batches: list[BatchHeader]) -> set[int]:
    """Positions of each producer's newest batch among ``batches``."""
    newest: dict[int, BatchHeader] = {}
    for batch in batches:
        if batch.producer_id >= 0:
            newest[batch.producer_id] = batch
    return {batch.position for batch in newest.values()}

