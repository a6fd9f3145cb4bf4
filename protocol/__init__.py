"""Kafscale's sans-io protocol layer: bytes in, objects out, no sockets, no storage.

- :mod:`.framing` — size-prefixed frames with a maximum size
- :mod:`.messages` — request/response codecs (over kio) and request headers
- :mod:`.api_versions` — the API keys and versions we serve
- :mod:`.errors` — Kafka error codes and our typed errors
- :mod:`.records` — RecordBatch v2: validate, re-stamp, iterate, build
- :mod:`.compression` — gzip, snappy (raw and xerial), lz4 frame, zstd
- :mod:`.segment` / :mod:`.index` — the on-storage segment and index formats
"""

from .api_versions import SERVED_VERSIONS, ApiKey, VersionRange
from .compression import Compression
from .errors import (
    CompressionError,
    CorruptBatch,
    ErrorCode,
    FrameTooLarge,
    KafkaError,
    MalformedFrame,
    ProtocolError,
    SegmentFormatError,
    UnsupportedVersion,
)
from .framing import FrameDecoder, encode_frame
from .index import IndexEntry, SegmentIndex, build_index
from .messages import Request, RequestHeader, decode_request, encode_response
from .records import BatchHeader, Record, RecordHeader, build_batch, iter_records, split_batches
from .segment import Segment, SegmentBuilder, read_segment

__all__ = [
    "ApiKey",
    "BatchHeader",
    "Compression",
    "CompressionError",
    "CorruptBatch",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLarge",
    "IndexEntry",
    "KafkaError",
    "MalformedFrame",
    "ProtocolError",
    "Record",
    "RecordHeader",
    "Request",
    "RequestHeader",
    "SERVED_VERSIONS",
    "Segment",
    "SegmentBuilder",
    "SegmentFormatError",
    "SegmentIndex",
    "UnsupportedVersion",
    "VersionRange",
    "build_batch",
    "build_index",
    "decode_request",
    "encode_frame",
    "encode_response",
    "iter_records",
    "read_segment",
    "split_batches",
]
