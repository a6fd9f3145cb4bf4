"""The object key layout (spec): ``{namespace}/{topic}/{partition}/segment-{base:020d}.kfs``.

Part of the on-storage format, shared by the gateway (writer) and the Spark
reader; zero-padded base offsets make a key listing come out in offset order.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "META_PREFIX",
    "TOPICS_DOCUMENT",
    "topic_prefix",
    "partition_prefix",
    "segment_key",
    "index_key",
    "index_key_of_segment",
    "segment_partition",
    "parse_segment_key",
    "topics_key",
    "security_key",
    "LOG_PREFIX",
    "log_prefix",
    "log_object_key",
    "parse_log_object_key",
    "log_object_namespace",
    "writer_node",
    "cleaner_checkpoint_key",
    "id_object_name",
    "id_of_object_name",
    "DIGEST_NAME_PREFIX",
]

_SEGMENT = re.compile(r"segment-(\d{20})\.kfs$")
_LOG_OBJECT = re.compile(r"/~log/((\d+)-[0-9a-f]+)/(\d{20})\.kfl$")

# '~' cannot appear in a Kafka topic name, so this prefix never collides with a topic.
META_PREFIX = "~meta"
TOPICS_DOCUMENT = "topics.json"
SECURITY_DOCUMENT = "security.json"  # SCRAM credentials (salted) and ACLs of a single gateway
# Shared log objects: {namespace}/~log/{writer}/{sequence:020d}.kfl, where a writer is one
# run of one gateway, "{node id}-{incarnation}" (incarnation: hex, unique per start).
LOG_PREFIX = "~log"


# A group or transactional id names its object: in hex up to 100 bytes (readable, and what
# earlier versions wrote), by its SHA-256 beyond (Kafka allows ids of 32,767 bytes; a
# filesystem name ends at 255 bytes, an S3 key at 1,024). A digest-named document holds the id.
_ID_HEX_MAX = 200
DIGEST_NAME_PREFIX = "sha256-"


def id_object_name(identifier: str) -> str:
    """The object name (no extension) of a group or transactional id."""
    named = identifier.encode().hex()
    if len(named) <= _ID_HEX_MAX:
        return named
    return DIGEST_NAME_PREFIX + hashlib.sha256(identifier.encode()).hexdigest()


def id_of_object_name(name: str) -> str | None:
    """The id a hex object name spells; None for a digest name (the id is in the document)
    or a name that is not one of these."""
    try:
        return bytes.fromhex(name).decode()
    except ValueError:
        return None


def topics_key(namespace: str) -> str:
    return f"{namespace}/{META_PREFIX}/{TOPICS_DOCUMENT}"


def security_key(namespace: str) -> str:
    return f"{namespace}/{META_PREFIX}/{SECURITY_DOCUMENT}"


def meta_prefix(namespace: str, kind: str | None = None) -> str:
    """``{namespace}/~meta/``, or the folder of one kind of document under it (``groups``,
    ``transactions``, ``lfs``: one object per group, transactional id, upload)."""
    return f"{namespace}/{META_PREFIX}/" + (f"{kind}/" if kind else "")


def topic_prefix(namespace: str, topic: str) -> str:
    return f"{namespace}/{topic}/"


def partition_prefix(namespace: str, topic: str, partition: int) -> str:
    return f"{namespace}/{topic}/{partition}/"


def segment_key(namespace: str, topic: str, partition: int, base_offset: int) -> str:
    return f"{namespace}/{topic}/{partition}/segment-{base_offset:020d}.kfs"


def index_key(namespace: str, topic: str, partition: int, base_offset: int) -> str:
    return f"{namespace}/{topic}/{partition}/segment-{base_offset:020d}.index"


def index_key_of_segment(key: str) -> str:
    """The index object beside a segment."""
    if parse_segment_key(key) is None:
        raise ValueError(f"{key!r} is not a segment key")
    return key[: -len(".kfs")] + ".index"


def cleaner_checkpoint_key(namespace: str, topic: str, partition: int) -> str:
    """Where the cleaner keeps how far a compacted partition is clean (not a segment: listings
    of segments skip it)."""
    return f"{namespace}/{topic}/{partition}/cleaner-checkpoint.json"


def transaction_state_key(namespace: str, topic: str, partition: int) -> str:
    """A partition's transactions (open ones, aborted spans): written by its owner, read at
    load and by Spark (not a segment: listings of segments skip it)."""
    return f"{namespace}/{topic}/{partition}/transactions.json"


def parse_segment_key(key: str) -> int | None:
    """Base offset of a segment key, or ``None`` for any other object."""
    match = _SEGMENT.search(key)
    return int(match.group(1)) if match else None


def segment_partition(key: str) -> tuple[str, str, int] | None:
    """``(namespace, topic, partition)`` of a segment key, or ``None`` for any other object."""
    parts = key.rsplit("/", 3)
    if len(parts) != 4 or parse_segment_key(key) is None or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


def log_prefix(namespace: str, writer: str | None = None) -> str:
    return f"{namespace}/{LOG_PREFIX}/" + (f"{writer}/" if writer else "")


def log_object_key(namespace: str, writer: str, sequence: int) -> str:
    return f"{namespace}/{LOG_PREFIX}/{writer}/{sequence:020d}.kfl"


def parse_log_object_key(key: str) -> tuple[str, int] | None:
    """(writer, sequence) of a log object key, or ``None`` for any other object."""
    match = _LOG_OBJECT.search(key)
    return (match.group(1), int(match.group(3))) if match else None


def log_object_namespace(key: str) -> str | None:
    """The namespace of a log object key, or ``None`` for any other object."""
    match = _LOG_OBJECT.search(key)
    return key[: match.start()] if match else None


def writer_node(writer: str) -> int:
    """The node id of the gateway a writer id belongs to."""
    return int(writer.split("-", 1)[0])
