"""Kafka error codes and the typed errors of the protocol layer.

``ErrorCode`` is kio's IntEnum (generated from Kafka's own error table, with a
``retriable`` flag); we re-export it so the rest of Kafscale never reaches into
kio for it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from .api_versions import SERVED_VERSIONS, ApiKey

__all__ = [
    "ErrorCode",
    "KafkaError",
    "ProtocolError",
    "FrameTooLarge",
    "MalformedFrame",
    "UnsupportedVersion",
    "CorruptBatch",
    "CompressionError",
    "RecordsWithoutKey",
    "InvalidRecord",
    "SegmentFormatError",
]


class KafkaError(Exception):
    """An error that maps to one Kafka error code (answered to the client)."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class ProtocolError(Exception):
    """The peer broke the wire protocol; the connection must be closed."""


class FrameTooLarge(ProtocolError):
    """A size prefix announced more bytes than the configured maximum."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {limit} bytes")
        self.size = size
        self.limit = limit


class MalformedFrame(ProtocolError):
    """A frame whose header or body could not be decoded."""


class UnsupportedVersion(KafkaError):
    """An API key or version we do not serve (answered with UNSUPPORTED_VERSION)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            super().__init__(ErrorCode.unsupported_version, f"api key {api_key} (v{api_version}) is not served")
        else:
            served = SERVED_VERSIONS.get(ApiKey(api_key))
            which = f"v{served.min_version}-v{served.max_version} are" if served else "no version is"
            why = ""
            if served and api_version < served.min_version and api_key in (ApiKey.PRODUCE, ApiKey.FETCH):
                why = " (they carry the message formats before v2, which Kafka 4 removed too)"
            super().__init__(ErrorCode.unsupported_version,
                             f"{name} (api key {api_key}) v{api_version} is not served: {which}{why}")
        self.api_key = api_key
        self.api_version = api_version


class CorruptBatch(KafkaError):
    """A record batch that fails structure or CRC validation (CORRUPT_MESSAGE)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)


class CompressionError(CorruptBatch):
    """A compressed record payload that cannot be decompressed."""


class InvalidRecord(CorruptBatch):
    """Records that decode but contradict their batch header (INVALID_RECORD):
    a wrong count or offset deltas out of sequence. Not retriable, as in Kafka."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode.invalid_record


class RecordsWithoutKey(InvalidRecord):
    """Records without a key sent to a compacted topic (INVALID_RECORD, as Kafka answers);
    ``indexes`` are their places in their batch (Produce v8+ ``record_errors``)."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(f"a compacted topic cannot accept a record without a key ({len(indexes)} in the batch, "
                         f"the first at index {indexes[0]})")
        self.indexes = indexes


class SegmentFormatError(Exception):
    """A segment or index object that is truncated, torn or corrupt."""
