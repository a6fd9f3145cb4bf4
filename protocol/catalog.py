"""The topic catalog as stored: one JSON document, so the store describes itself.

Alone, a gateway keeps it at ``{namespace}/~meta/topics.json`` and rewrites it on
each change. In a cluster the catalog lives in etcd, and the gateways mirror it
into the store as ``{namespace}/~meta/catalog/{etcd revision:020d}.json`` (put-if-absent;
readers take the highest revision), so Spark reads a cluster's topics from the
bucket alone. ::

    {"version": 1, "producer_id_block_end": n,
     "topics": {name: {"id": uuid, "partitions": n, "configs": {…}, "log_start": {"p": offset}}}}
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

__all__ = ["CATALOG_VERSION", "TopicInfo", "encode_catalog", "decode_catalog", "catalog_key", "catalog_prefix",
           "newest_catalog_key"]

CATALOG_VERSION = 1
_CATALOG = re.compile(r"/~meta/catalog/(\d{20})\.json$")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic of the catalog (also an etcd key's value in a cluster)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    # Log start offsets moved by DeleteRecords (retention moves them by deleting segments).
    log_start: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"id": str(self.topic_id), "partitions": self.partitions, "configs": self.configs,
                "log_start": {str(p): o for p, o in sorted(self.log_start.items())}}

    @classmethod
    def from_json(cls, name: str, data: dict) -> TopicInfo:
        """``ValueError`` (or KeyError, TypeError) if ``data`` is not a topic."""
        return cls(name, uuid.UUID(data["id"]), int(data["partitions"]),
                   # A null value (stored by versions that took a null SET) means "not set".
                   {str(k): str(v) for k, v in dict(data.get("configs", {})).items() if v is not None},
                   {int(p): int(o) for p, o in data.get("log_start", {}).items()})


def encode_catalog(topics: dict[str, TopicInfo], producer_id_block_end: int = 0) -> bytes:
    document = {"version": CATALOG_VERSION, "producer_id_block_end": producer_id_block_end,
                "topics": {name: topics[name].to_json() for name in sorted(topics)}}
    return json.dumps(document, indent=1).encode()


def decode_catalog(raw: bytes) -> tuple[dict[str, TopicInfo], int]:
    """(topics by name, producer id block end); ``ValueError`` if it is not a catalog."""
    try:
        document = json.loads(raw)
        topics = document["topics"]
        if not isinstance(topics, dict):
            raise ValueError("topics must map names to topics")
        return ({str(name): TopicInfo.from_json(str(name), data) for name, data in topics.items()},
                int(document.get("producer_id_block_end", 0)))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a topic catalog: {exc!r}") from exc


def catalog_prefix(namespace: str) -> str:
    return f"{namespace}/~meta/catalog/"


def catalog_key(namespace: str, revision: int) -> str:
    return f"{catalog_prefix(namespace)}{revision:020d}.json"


def newest_catalog_key(keys: list[str]) -> str | None:
    revisions = [(int(m.group(1)), key) for key in keys if (m := _CATALOG.search(key))]
    return max(revisions)[1] if revisions else None
