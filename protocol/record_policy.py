"""What a topic's configs ask of produced batches, sans-io: timestamp bounds,
LogAppendTime, and the topic's codec (keys on compacted topics are checked by the
validating walk, :func:`kafscale.protocol.records.validate_record_set`).

The checks find the records at fault (their index in their batch, Kafka's
``record_errors``); the changes rewrite a batch in place or as new bytes, with a
fresh CRC. The base offset is left alone: it is stamped when offsets are assigned.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from .compression import Compression, compress, decompress
from .records import BATCH_HEADER_SIZE, CODEC_MASK, LOG_APPEND_TIME_BIT, BatchHeader, decode_columns

__all__ = ["CODECS", "records_out_of_time", "stamp_log_append_time", "recompress"]

CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}

_CRC_AT = 17  # the CRC field; it covers everything from the attributes on
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_LENGTH_AT = 8
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")


def records_out_of_time(data: bytes | memoryview, header: BatchHeader, earliest: int, latest: int) -> list[int]:
    """Indexes of the batch's records whose CreateTime is outside ``[earliest, latest]``."""
    columns: tuple[list, list, list, list, None] = ([], [], [], [], None)
    decode_columns(data, header, -(1 << 63), 1 << 63, columns)
    timestamps = columns[1]
    return [index for index, stamp in enumerate(timestamps) if not earliest <= stamp <= latest]


def stamp_log_append_time(buffer: bytearray | memoryview, header: BatchHeader, now_ms: int) -> BatchHeader:
    """Mark the batch at ``header.position`` LogAppendTime at ``now_ms``, as Kafka does: the
    timestamp type bit and the max timestamp change (readers give every record that time)."""
    at = header.position
    attributes = header.attributes | LOG_APPEND_TIME_BIT
    _INT16.pack_into(buffer, at + _ATTRIBUTES_AT, attributes)
    _INT64.pack_into(buffer, at + _MAX_TIMESTAMP_AT, now_ms)
    crc = crc32c(memoryview(buffer)[at + _ATTRIBUTES_AT: at + header.size])
    _UINT32.pack_into(buffer, at + _CRC_AT, crc)
    return BatchHeader(header.base_offset, header.batch_length, header.partition_leader_epoch, header.magic, crc,
                       attributes, header.last_offset_delta, header.base_timestamp, now_ms, header.producer_id,
                       header.producer_epoch, header.base_sequence, header.records_count, header.position)


def recompress(data: bytes | memoryview, header: BatchHeader, codec: Compression, level: int | None = None,
               max_uncompressed: int = 1 << 30) -> bytes:
    """The batch with its records (unchanged, byte for byte) compressed with ``codec``."""
    begin = header.position + BATCH_HEADER_SIZE
    end = header.position + header.size
    records = data[begin:end]
    if header.compression:
        records = decompress(header.compression, records, max_uncompressed)
    payload = compress(codec, bytes(records), level=level, xerial=codec == Compression.SNAPPY)  # as Kafka writes it
    batch = bytearray(data[header.position:begin])
    batch += payload
    _INT32.pack_into(batch, _LENGTH_AT, len(batch) - 12)
    _INT16.pack_into(batch, _ATTRIBUTES_AT, (header.attributes & ~CODEC_MASK) | int(codec))
    _UINT32.pack_into(batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return bytes(batch)
