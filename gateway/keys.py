"""The object key layout, defined with the on-storage formats in :mod:`kafscale.protocol.layout`."""

from kafscale.protocol.layout import (  # noqa: F401
    META_PREFIX,
    index_key,
    parse_segment_key,
    partition_prefix,
    segment_key,
    topic_prefix,
    topics_key,
)

__all__ = ["META_PREFIX", "index_key", "parse_segment_key", "partition_prefix", "segment_key", "topic_prefix",
           "topics_key"]
