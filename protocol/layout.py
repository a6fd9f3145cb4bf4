"""The object key layout (spec): ``{namespace}/{topic}/{partition}/segment-{base:020d}.kfs``.

Part of the on-storage format, shared by the gateway (writer) and the Spark
reader; zero-padded base offsets make a key listing come out in offset order.
"""

from __future__ import annotations

import re

__all__ = [
    "META_PREFIX",
    "TOPICS_DOCUMENT",
    "topic_prefix",
    "partition_prefix",
    "segment_key",
    "index_key",
    "parse_segment_key",
    "topics_key",
]

_SEGMENT = re.compile(r"segment-(\d{20})\.kfs$")

# '~' cannot appear in a Kafka topic name, so this prefix never collides with a topic.
META_PREFIX = "~meta"
TOPICS_DOCUMENT = "topics.json"


def topics_key(namespace: str) -> str:
    return f"{namespace}/{META_PREFIX}/{TOPICS_DOCUMENT}"


def topic_prefix(namespace: str, topic: str) -> str:
    return f"{namespace}/{topic}/"


def partition_prefix(namespace: str, topic: str, partition: int) -> str:
    return f"{namespace}/{topic}/{partition}/"


def segment_key(namespace: str, topic: str, partition: int, base_offset: int) -> str:
    return f"{namespace}/{topic}/{partition}/segment-{base_offset:020d}.kfs"


def index_key(namespace: str, topic: str, partition: int, base_offset: int) -> str:
    return f"{namespace}/{topic}/{partition}/segment-{base_offset:020d}.index"


def parse_segment_key(key: str) -> int | None:
    """Base offset of a segment key, or ``None`` for any other object."""
    match = _SEGMENT.search(key)
    return int(match.group(1)) if match else None
