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

__all__ = ["Compression", "compress", "decompress", "XERIAL_MAGIC"]

XERIAL_MAGIC = b"\x82SNAPPY\x00"  # how Java clients frame snappy
_XERIAL_MAGIC = XERIAL_MAGIC
_XERIAL_HEADER = struct.Struct(">8sii")
_BLOCK_SIZE = struct.Struct(">i")


class Compression(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(codec: Compression, data: bytes, *, xerial: bool = False, level: int | None = None) -> bytes:
    """``level``: the codec's level (Kafka's compression.*.level), its default if ``None``."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        packer = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()
    if codec == Compression.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        if not xerial:
            return block
        return _XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1) + _BLOCK_SIZE.pack(len(block)) + block
    if codec == Compression.LZ4:
        return lz4.frame.compress(data) if level is None else lz4.frame.compress(data, compression_level=level)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise CompressionError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: bytes | memoryview, max_size: int = 1 << 30) -> bytes:
    """Decompress one batch payload to at most ``max_size`` bytes; a payload that is
    corrupt, truncated or inflates beyond the bound is a :class:`CompressionError`
    (no codec is allowed to allocate past the bound first: decompression bombs)."""
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
            return _snappy_decompress(bytes(data), max_size)
        if codec == Compression.LZ4:
            frame = lz4.frame.LZ4FrameDecompressor()
            out = frame.decompress(data, max_length=max_size + 1)
            if len(out) > max_size:
                raise CompressionError(f"lz4 payload inflates beyond {max_size} bytes")
            if not frame.eof:
                raise CompressionError("truncated lz4 payload")
            return out
        if codec == Compression.ZSTD:
            return _zstd_decompress(data, max_size)
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own types; all mean corrupt
        raise CompressionError(f"cannot decompress {_name(codec)} payload: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec}")


def _zstd_decompress(data: bytes | memoryview, max_size: int) -> bytes:
    declared = zstandard.frame_content_size(data)
    if declared > max_size:
        raise CompressionError(f"zstd payload declares {declared} bytes, beyond {max_size}")
    if declared < 0:
        # Streaming encoders (Java's) omit the size: bound a first pass by reading.
        probe = zstandard.ZstdDecompressor().stream_reader(data).read(max_size + 1)
        if len(probe) > max_size:
            raise CompressionError(f"zstd payload inflates beyond {max_size} bytes")
    # decompressobj copes with frames that omit the content size and reports truncation.
    unpacker = zstandard.ZstdDecompressor().decompressobj()
    out = unpacker.decompress(data)
    if not unpacker.eof:
        raise CompressionError("truncated zstd payload")
    return out


def _snappy_block(block: bytes, budget: int) -> bytes:
    size = cramjam.snappy.decompress_raw_len(block)
    if size > budget:
        raise CompressionError("snappy payload inflates beyond its bound")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, max_size)
    pos = _XERIAL_HEADER.size
    if len(data) < pos:
        raise CompressionError("truncated xerial snappy header")
    chunks = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("truncated xerial snappy block length")
        (size,) = _BLOCK_SIZE.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError("xerial snappy block runs past the payload")
        chunk = _snappy_block(data[pos : pos + size], max_size - total)
        chunks.append(chunk)
        total += len(chunk)
        pos += size
    return b"".join(chunks)


def _name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"
