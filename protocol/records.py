"""Kafka RecordBatch v2 (magic 2): validate, re-stamp, iterate, build.

Layout of the 61-byte header (big-endian)::

    0  base_offset            int64   -- not covered by the CRC
    8  batch_length           int32   -- bytes after this field
    12 partition_leader_epoch int32   -- not covered by the CRC
    16 magic                  int8    == 2
    17 crc                    uint32  -- CRC-32C of bytes [21, 12 + batch_length)
    21 attributes             int16   -- codec bits 0-2, timestamp type 3,
                                         transactional 4, control 5
    23 last_offset_delta      int32
    27 base_timestamp         int64
    35 max_timestamp          int64
    43 producer_id            int64
    51 producer_epoch         int16
    53 base_sequence          int32
    57 records_count          int32

The produce hot path only parses headers, checks CRCs and rewrites
``base_offset``; batches are stored byte-exact in the client's compression.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, cast

from crc32c import crc32c

from .compression import Compression, compress, decompress
from .errors import CorruptBatch, InvalidRecord, RecordsWithoutKey
from .varint import read_varint, write_varint

_native_walk: Callable[[Any, int, int, int, list[int] | None], int] | None
_native_split: Callable[[Any, type, Any], list[BatchHeader]] | None
_native_validate: Callable[[Any, type, Any], list[BatchHeader]] | None
_native_crc: Callable[[Any, list[BatchHeader], int], int] | None
try:  # the C batch checks (protocol/_record_walk.c); the Python ones below are the reference
    from ._record_walk import record_set_crc as _native_crc
    from ._record_walk import split as _native_split
    from ._record_walk import validate as _native_validate
    from ._record_walk import walk as _native_walk
except ImportError:  # pragma: no cover - a build without a compiler
    _native_walk = _native_split = _native_validate = _native_crc = None

__all__ = [
    "salvage_batches",
    "BATCH_HEADER_SIZE",
    "CODEC_MASK",
    "LOG_APPEND_TIME_BIT",
    "TRANSACTIONAL_BIT",
    "CONTROL_BIT",
    "DELETE_HORIZON_BIT",
    "BatchHeader",
    "Record",
    "RecordHeader",
    "parse_batch_header",
    "split_batches",
    "validate_record_set",
    "has_transactional_batch",
    "check_records",
    "walk_records",
    "restamp",
    "record_set_crc",
    "iter_records",
    "build_batch",
    "batch_of",
]

BATCH_HEADER_SIZE = 61
_OVERHEAD = 12  # base_offset + batch_length, outside batch_length
_CRC_START = 21
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")

# A batch's attribute bits (Kafka's DefaultRecordBatch).
CODEC_MASK = 0x07
LOG_APPEND_TIME_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # set by the cleaner: the base timestamp is the delete horizon (KIP-534)


class BatchHeader(NamedTuple):
    """A record batch's header (immutable). A named tuple, not a frozen dataclass: one is
    made per batch several times on the produce path, and a frozen dataclass's constructor
    costs five times a tuple's."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0  # where the batch starts in the buffer it was parsed from

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + _OVERHEAD

    def at(self, *, base_offset: int | None = None, position: int | None = None) -> BatchHeader:
        """This header moved to another base offset or buffer position (on the produce path per
        batch: the constructor is faster than ``_replace``)."""
        return BatchHeader(self.base_offset if base_offset is None else base_offset, self.batch_length,
                           self.partition_leader_epoch, self.magic, self.crc, self.attributes,
                           self.last_offset_delta, self.base_timestamp, self.max_timestamp, self.producer_id,
                           self.producer_epoch, self.base_sequence, self.records_count,
                           self.position if position is None else position)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & LOG_APPEND_TIME_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


class RecordHeader(NamedTuple):
    key: str
    value: bytes | None


class Record(NamedTuple):
    offset: int
    timestamp: int  # milliseconds since the epoch
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...] = ()


def parse_batch_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check one batch header at ``pos`` (no CRC check)."""
    if len(data) - pos < BATCH_HEADER_SIZE:
        raise CorruptBatch(
            f"{len(data) - pos} bytes left at position {pos}, a batch header needs 61"
        )
    header = BatchHeader._make((*_HEADER.unpack_from(data, pos), pos))  # the 13 header fields, then where
    if header.magic != 2:
        raise CorruptBatch(f"unsupported record batch magic {header.magic} (only v2)")
    if header.batch_length < BATCH_HEADER_SIZE - _OVERHEAD:
        raise CorruptBatch(f"batch length {header.batch_length} is shorter than its header")
    if pos + header.size > len(data):
        raise CorruptBatch(
            f"batch at position {pos} claims {header.size} bytes, "
            f"only {len(data) - pos} remain"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptBatch("negative record count or last offset delta")
    if header.compression > Compression.ZSTD:
        raise CorruptBatch(f"unknown compression codec {header.compression}")
    return header


def split_batches(data: bytes | memoryview, *, check_crc: bool = True, native: bool = True) -> list[BatchHeader]:
    """Parse every batch of a record set, checking structure and (optionally) CRCs: in one C
    call when built, else by the Python reference."""
    if native and _native_split is not None:
        return _translated(_native_split, data, BatchHeader, crc32c if check_crc else None)
    view = memoryview(data)
    headers: list[BatchHeader] = []
    pos = 0
    end = len(view)
    while pos < end:
        header = parse_batch_header(view, pos)
        batch_end = pos + header.size
        if check_crc and crc32c(view[pos + _CRC_START : batch_end]) != header.crc:
            raise CorruptBatch(f"CRC mismatch in batch at position {pos}")
        headers.append(header)
        pos = batch_end
    return headers


def _translated(native: Callable[..., Any], *args: Any) -> Any:
    """A C check's result, its ``ValueError((kind, message))`` raised as our errors."""
    try:
        return native(*args)
    except ValueError as exc:
        kind, message = exc.args
        raise (InvalidRecord if kind else CorruptBatch)(message) from None


def salvage_batches(data: bytes | memoryview, start: int, end: int, first_offset: int,
                    last_offset: int, *, gaps: bool = False) -> tuple[list[BatchHeader], list[tuple[int, int]]]:
    """The intact batches of a damaged stretch ``data[start:end]`` that should hold offsets
    ``first_offset..last_offset``, and the offset ranges that cannot be served.

    A batch whose CRC fails, but whose header is in place (its base offset the one expected,
    or with ``gaps`` — a cleaned stretch — any later one; its length within the stretch), is
    one damaged range and the walk goes on after it; anything else ends the walk, and
    everything from there to ``last_offset`` is damaged.
    """
    view = memoryview(data)[:end]
    intact: list[BatchHeader] = []
    damaged: list[tuple[int, int]] = []
    expected, pos = first_offset, start
    while expected <= last_offset:
        try:
            header = parse_batch_header(view, pos)
        except CorruptBatch:
            break
        if header.base_offset < expected or (header.base_offset > expected and not gaps) \
                or header.last_offset > last_offset:
            break
        if crc32c(view[pos + _CRC_START : pos + header.size]) == header.crc:
            intact.append(header)
        else:
            damaged.append((expected, header.last_offset))
        expected, pos = header.last_offset + 1, pos + header.size
    if expected <= last_offset:
        damaged.append((expected, last_offset))
    return intact, damaged


def has_transactional_batch(data: bytes | memoryview) -> bool:
    """Whether the record set's first batch is transactional (read before anything else is
    checked, as Kafka decides a produce request is transactional)."""
    if len(data) < BATCH_HEADER_SIZE:
        return False
    return bool(struct.unpack_from(">h", data, 21)[0] & TRANSACTIONAL_BIT)


def validate_record_set(data: bytes | memoryview, max_uncompressed: int = 1 << 30, *,
                        require_keys: bool = False, native: bool = True) -> list[BatchHeader]:
    """What a produce request must pass: at least one batch, each well formed with a good
    CRC, a record count that agrees with its last offset delta, and records (decompressed
    to at most ``max_uncompressed`` bytes) that agree with both. A batch is stored as
    sent, so a lie in its header would become wrong offsets for every reader.

    ``require_keys`` (a compacted topic): a batch holding records without a key raises
    :class:`RecordsWithoutKey` naming them, found by the same walk. ``native=False``: the
    Python reference only (what the C checks are tested against)."""
    if native and _native_validate is not None and not require_keys:
        # One C call checks every batch up to the first compressed one; the rest (a payload
        # to decompress) are checked here.
        headers: list[BatchHeader] = _translated(_native_validate, data, BatchHeader, crc32c)
        if not headers:
            raise CorruptBatch("empty record set")
        for index, header in enumerate(headers):
            if header.attributes & CODEC_MASK:
                _check_client_batches(data, headers[index:], max_uncompressed, require_keys)
                break
        return headers
    headers = split_batches(data, native=native)
    if not headers:
        raise CorruptBatch("empty record set")
    _check_client_batches(data, headers, max_uncompressed, require_keys, native=native)
    return headers


def _check_client_batches(data: bytes | memoryview, headers: list[BatchHeader], max_uncompressed: int,
                          require_keys: bool, *, native: bool = True) -> None:
    """What each batch of a client's record set must pass beyond its structure and CRC."""
    for header in headers:
        if header.is_control:  # markers are the transaction coordinator's, never a client's (Kafka's rule)
            raise InvalidRecord(f"batch at position {header.position} is a control batch: clients may not write them")
        if header.records_count == 0 or header.last_offset_delta != header.records_count - 1:
            raise InvalidRecord(
                f"batch at position {header.position} has {header.records_count} records "
                f"but last offset delta {header.last_offset_delta}"
            )
        keyless: list[int] | None = [] if require_keys else None
        check_records(data, header, max_uncompressed, keyless, native=native)
        if keyless:
            raise RecordsWithoutKey(keyless)


def check_records(data: bytes | memoryview, header: BatchHeader, max_uncompressed: int = 1 << 30,
                  keyless: list[int] | None = None, *, native: bool = True) -> None:
    """Walk a batch's records without materialising them: each record's fields must add
    up to its length, offset deltas must run 0, 1, ... and the count must match the header.

    :raises CompressionError: the payload does not decompress (within the bound).
    :raises InvalidRecord: the records contradict the header's count or offsets.
    :raises CorruptBatch: a record's fields run past it or past the batch.

    ``keyless``, if a list, gets the index of each record without a key.
    """
    begin = header.position + BATCH_HEADER_SIZE
    end = header.position + header.size
    if header.compression:
        payload: bytes | memoryview = decompress(header.compression, data[begin:end], max_uncompressed)
        begin, end = 0, len(payload)
    else:
        payload = data
    pos = walk_records(payload, begin, end, header.records_count, native=native, keyless=keyless)
    if pos != end:
        raise InvalidRecord(
            f"batch at position {header.position} holds more records than its count {header.records_count}"
        )


def walk_records(payload: bytes | memoryview, pos: int, end: int, count: int, *, native: bool = True,
                 keyless: list[int] | None = None) -> int:
    """Walk ``count`` records in ``payload[pos:end]``; returns where the last one ends.
    The C walk when built (a few ns a record), else the Python one (about 1 us).
    ``keyless``, if a list, gets the index of each record without a key."""
    if native and _native_walk is not None:
        return _translated(_native_walk, payload, pos, end, count, keyless)
    try:
        return _walk_records(payload, pos, end, count, keyless)
    except IndexError:
        raise CorruptBatch("a record runs past the end of the batch") from None


def _walk_records(payload: bytes | memoryview, pos: int, end: int, count: int,
                  keyless: list[int] | None = None) -> int:
    # The reference for the C walk, and its fallback: plain rather than fast.
    for expected in range(count):
        if pos >= end:
            raise InvalidRecord(f"batch holds {expected} records, its header says {count}")
        length, pos = read_varint(payload, pos)
        record_end = pos + length
        if length < 6 or record_end > end:
            raise CorruptBatch(f"record length {length} runs past the batch")
        _, cursor = read_varint(payload, pos + 1)  # the attributes byte, then the timestamp delta
        offset_delta, cursor = read_varint(payload, cursor)
        if cursor > record_end:  # a delta that runs past the record: corrupt, whatever it reads as
            raise CorruptBatch(f"record {expected}: its fields do not add up to its length {length}")
        if offset_delta != expected:
            raise InvalidRecord(f"record {expected} has offset delta {offset_delta}")
        for field in range(2):  # key, value; a negative length is null
            size, cursor = read_varint(payload, cursor)
            cursor += max(size, 0)
            if field == 0 and size < 0 and keyless is not None and cursor <= record_end:
                keyless.append(expected)
        cursor = _skip_headers(payload, cursor, record_end, expected)
        if cursor != record_end:
            raise CorruptBatch(f"record {expected}: its fields do not add up to its length {length}")
        pos = record_end
    return pos


def _skip_headers(payload: bytes | memoryview, cursor: int, record_end: int, index: int) -> int:
    count, cursor = read_varint(payload, cursor)
    if count < 0:
        raise CorruptBatch(f"record {index} has a negative header count")
    for _ in range(count):
        size, cursor = read_varint(payload, cursor)
        if size < 0:
            raise CorruptBatch(f"record {index} has a null header key")
        size, cursor = read_varint(payload, cursor + size)
        cursor += max(size, 0)
        if cursor > record_end:
            break
    return cursor


def restamp(
    buffer: bytearray | memoryview, headers: Sequence[BatchHeader], base_offset: int
) -> list[BatchHeader]:
    """Rewrite each batch's base offset so the record set starts at ``base_offset``.

    Only the first 8 bytes of each batch change; the CRC does not cover them.
    Returns the headers as they now read.
    """
    stamped = []
    next_offset = base_offset
    for header in headers:
        _BASE_OFFSET.pack_into(buffer, header.position, next_offset)
        stamped.append(header.at(base_offset=next_offset))
        next_offset += header.last_offset_delta + 1
    return stamped


def record_set_crc(data: bytes | bytearray | memoryview, headers: list[BatchHeader], crc: int = 0) -> int:
    """``crc32c(data, crc)`` of a record set whose batches' CRCs were checked (``headers``, as
    they read now, cover it in order). In C only the 21 bytes before each batch's checked
    span are read, the batch's own CRC standing for the rest: a log object's entry CRC
    then costs no second pass over bytes that have left the processor's caches."""
    if _native_crc is None:  # pragma: no cover - a build without a compiler
        return crc32c(data, crc)
    return _native_crc(data, headers, crc)


def iter_records(batch: bytes | memoryview, header: BatchHeader | None = None) -> Iterator[Record]:
    """Decode the records of one batch (decompressing if needed).

    Control batches yield their control records like any other; callers that
    serve user data skip ``header.is_control`` batches.
    """
    if header is None:
        header = parse_batch_header(batch, 0)
    columns: tuple[list[Any], list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [], [])
    decode_columns(batch, header, -(1 << 63), 1 << 63, columns)
    return map(Record, *columns)


def _decode_headers(
    payload: bytes, pos: int, count: int, limit: int
) -> tuple[tuple[RecordHeader, ...], int]:
    headers = []
    for _ in range(count):
        key_len, pos = read_varint(payload, pos)
        if key_len < 0 or pos + key_len > limit:
            raise CorruptBatch("bad record header key length")
        # As Java's clients do: malformed UTF-8 becomes U+FFFD, not an unreadable batch
        # (the broker never checks header keys, so such batches exist in real logs).
        key = payload[pos : pos + key_len].decode(errors="replace")
        pos += key_len
        value_len, pos = read_varint(payload, pos)
        if value_len < 0:
            value = None
        else:
            if pos + value_len > limit:
                raise CorruptBatch("bad record header value length")
            value = payload[pos : pos + value_len]
            pos += value_len
        headers.append(RecordHeader(key, value))
    return tuple(headers), pos


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None]] | Iterable[Record],
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    compression: Compression = Compression.NONE,
    xerial: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """Build one v2 batch. ``records`` are ``Record``s (their offsets and timestamps
    are kept relative to the first) or ``(key, value)`` pairs."""
    normalised: list[Record] = []
    for index, item in enumerate(records):
        if isinstance(item, Record):
            normalised.append(item)
        else:
            key, value = cast("tuple[bytes | None, bytes | None]", item)
            normalised.append(Record(base_offset + index, base_timestamp, key, value))
    if not normalised:
        raise ValueError("a batch needs at least one record")
    first_offset = normalised[0].offset
    first_timestamp = normalised[0].timestamp
    body = bytearray()
    for record in normalised:
        body += _encode_record(record, first_offset, first_timestamp)
    return batch_of(bytes(body), len(normalised), normalised[-1].offset - first_offset, first_timestamp,
                    max(record.timestamp for record in normalised), base_offset=base_offset,
                    compression=compression, xerial=xerial, producer_id=producer_id, producer_epoch=producer_epoch,
                    base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch,
                    transactional=transactional, control=control, log_append_time=log_append_time)


def batch_of(
    records_section: bytes,
    count: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    xerial: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """One v2 batch around ``count`` records already encoded (by :func:`build_batch`, or by a
    bulk encoder such as ``column_encoding``): header, compression, CRC."""
    payload = compress(compression, records_section, xerial=xerial)
    attributes = int(compression)
    if log_append_time:
        attributes |= LOG_APPEND_TIME_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + payload
    batch_length = 4 + 1 + 4 + len(after_crc)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc32c(after_crc))
        + after_crc
    )


def _encode_record(record: Record, first_offset: int, first_timestamp: int) -> bytes:
    body = bytearray(b"\x00")
    write_varint(record.timestamp - first_timestamp, body)
    write_varint(record.offset - first_offset, body)
    _write_nullable(record.key, body)
    _write_nullable(record.value, body)
    write_varint(len(record.headers), body)
    for header_key, header_value in record.headers:
        raw_key = header_key.encode()
        write_varint(len(raw_key), body)
        body += raw_key
        _write_nullable(header_value, body)
    out = bytearray()
    write_varint(len(body), out)
    return bytes(out + body)


def _write_nullable(data: bytes | None, out: bytearray) -> None:
    if data is None:
        write_varint(-1, out)
    else:
        write_varint(len(data), out)
        out += data


def _zigzag_fast(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """read_varint with the one- and two-byte cases (most record fields) unrolled.
    Callers turn the IndexError of truncated data into CorruptBatch."""
    first = data[pos]
    if first < 0x80:
        return (first >> 1) ^ -(first & 1), pos + 1
    second = data[pos + 1]
    if second < 0x80:
        value = (first & 0x7F) | (second << 7)
        return (value >> 1) ^ -(value & 1), pos + 2
    return read_varint(data, pos)


def decode_columns(
    data: bytes | memoryview,
    header: BatchHeader,
    start: int,
    end: int,
    columns: tuple[list, list, list, list, list | None],
) -> None:
    """Append the records of one batch with ``start <= offset < end`` to column lists
    ``(offsets, timestamps, keys, values, headers-or-None)``.

    The one record decoder (:func:`iter_records` wraps it): no per-record objects for
    bulk readers such as the Spark source, short varints decoded without the general loop.
    """
    begin = header.position + BATCH_HEADER_SIZE
    payload = data[begin : header.position + header.size]
    payload = decompress(header.compression, payload) if header.compression else bytes(payload)
    try:
        _decode_into(payload, header, start, end, columns)
    except IndexError:
        raise CorruptBatch("record runs past the end of the batch") from None


def _decode_into(payload: bytes, header: BatchHeader, start: int, end: int, columns) -> None:
    offsets, timestamps, keys, values, headers = columns
    varint = _zigzag_fast
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append = header.log_append_time
    size = len(payload)
    pos = 0
    for _ in range(header.records_count):
        length, pos = varint(payload, pos)
        record_end = pos + length
        if length < 6 or record_end > size:
            raise CorruptBatch(f"record length {length} runs past the batch")
        timestamp_delta, pos = varint(payload, pos + 1)  # skip the attributes byte
        offset_delta, pos = varint(payload, pos)
        key_len, pos = varint(payload, pos)
        if key_len < 0:
            key = None
        else:
            key = payload[pos : pos + key_len]
            pos += key_len
        value_len, pos = varint(payload, pos)
        if value_len < 0:
            value = None
        else:
            value = payload[pos : pos + value_len]
            pos += value_len
        header_count, pos = varint(payload, pos)
        record_headers: tuple[RecordHeader, ...] = ()
        if header_count:
            if header_count < 0:
                raise CorruptBatch("negative header count")
            record_headers, pos = _decode_headers(payload, pos, header_count, record_end)
        if pos != record_end:
            raise CorruptBatch("record fields do not add up to the record length")
        offset = base_offset + offset_delta
        if start <= offset < end:
            offsets.append(offset)
            timestamps.append(header.max_timestamp if log_append else base_timestamp + timestamp_delta)
            keys.append(key)
            values.append(value)
            if headers is not None:
                headers.append(record_headers)
    if pos != size:
        raise CorruptBatch(f"{size - pos} bytes after the last record of the batch")
