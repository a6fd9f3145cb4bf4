"""The compression codecs of Kafka record batches (attribute bits 0-2).

Kafka's wire formats, which are not always each library's default:
- gzip: a gzip member (RFC 1952);
- snappy: raw snappy blocks, or the xerial framing that Java clients send
  (magic ``\\x82SNAPPY\\x00``, two int32 versions, then int32-length blocks);
- lz4: the LZ4 frame format;
- zstd: a zstd frame, whose content size may be absent (streaming encoders).
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from .errors import CompressionError

__all__ = ["Compression", "compress", "decompress"]

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_BLOCK_SIZE = struct.Struct(">i")


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(codec: Compression, data: bytes, *, xerial: bool = False) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()
    if codec == Compression.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        if not xerial:
            return block
        return _XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1) + _BLOCK_SIZE.pack(len(block)) + block
    if codec == Compression.LZ4:
        return lz4.frame.compress(data)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise CompressionError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: bytes | memoryview, max_size: int = 1 << 30) -> bytes:
    """Decompress one batch payload; any failure is a :class:`CompressionError`."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            unpacker = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = unpacker.decompress(data, max_size)
            if unpacker.unconsumed_tail:
                raise CompressionError(f"gzip payload inflates beyond {max_size} bytes")
            if not unpacker.eof:
                raise CompressionError("truncated gzip payload")
            return out
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return lz4.frame.decompress(data)
        if codec == Compression.ZSTD:
            # decompressobj copes with frames that omit the content size.
            unpacker = zstandard.ZstdDecompressor().decompressobj()
            out = unpacker.decompress(data)
            if not unpacker.eof:
                raise CompressionError("truncated zstd payload")
            return out
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own types; all mean corrupt
        raise CompressionError(f"cannot decompress {_name(codec)} payload: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    if len(data) < pos:
        raise CompressionError("truncated xerial snappy header")
    chunks = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _BLOCK_SIZE.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError("xerial snappy block runs past the payload")
        chunks.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
        pos += size
    return b"".join(chunks)


def _name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"
