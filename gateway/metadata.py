"""Cluster metadata: topics, their ids, partition counts and configs.

:class:`MetadataStore` is the interface; :class:`EmbeddedMetadata` keeps the
document as one JSON object in the object store itself (``{namespace}/~meta/``),
so a single gateway needs nothing but its storage. The etcd implementation of
the cluster issue lives behind the same interface.
"""

from __future__ import annotations

import logging
import uuid
from typing import Protocol

import trio

from kafscale.protocol.catalog import TopicInfo, decode_catalog, encode_catalog
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import topics_key
from kafscale.storage_backends import ObjectNotFound

from .storage import AsyncStore

__all__ = ["TopicInfo", "MetadataStore", "EmbeddedMetadata", "MetadataUnreadable"]

log = logging.getLogger("kafscale.metadata")


class MetadataStore(Protocol):
    async def load(self) -> None: ...
    def topics(self) -> dict[str, TopicInfo]: ...
    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo: ...
    async def delete_topic(self, name: str) -> TopicInfo | None: ...
    async def allocate_producer_id(self) -> int: ...
    async def update_topic(self, name: str, *, partitions: int | None = None,
                           configs: dict[str, str] | None = None,
                           log_start: dict[int, int] | None = None) -> TopicInfo: ...


class MetadataUnreadable(RuntimeError):
    """The stored topic catalog cannot be parsed (the gateway refuses to start on it)."""


class EmbeddedMetadata:
    """Topics in one JSON object, rewritten whole on each change (changes are rare)."""

    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._key = topics_key(namespace)
        self._topics: dict[str, TopicInfo] = {}
        self._lock = trio.Lock()
        # Producer ids are handed out from blocks whose end is persisted first, so
        # no id is ever given twice, even across restarts.
        self._next_producer_id = 0
        self._producer_block_end = 0

    async def load(self) -> None:
        try:
            raw = await self._store.get(self._key)
        except ObjectNotFound:
            self._topics = {}
            return
        try:
            self._topics, self._producer_block_end = decode_catalog(raw)
            self._next_producer_id = self._producer_block_end
        except (ValueError, KeyError, TypeError) as exc:
            raise MetadataUnreadable(f"metadata object {self._key} is unreadable: {exc}") from exc

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    async def _save(self, topics: dict[str, TopicInfo], producer_block_end: int | None = None) -> None:
        block_end = self._producer_block_end if producer_block_end is None else producer_block_end
        document = encode_catalog(topics, block_end)
        await self._store.put(self._key, document)
        self._topics = topics
        self._producer_block_end = block_end

    async def update_topic(self, name: str, *, partitions: int | None = None,
                           configs: dict[str, str] | None = None,
                           log_start: dict[int, int] | None = None) -> TopicInfo:
        async with self._lock:
            info = self._topics.get(name)
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
            updated = TopicInfo(
                name, info.topic_id, info.partitions if partitions is None else partitions,
                dict(info.configs if configs is None else configs),
                {**info.log_start, **(log_start or {})},
            )
            await self._save({**self._topics, name: updated})
            return updated

    async def allocate_producer_id(self) -> int:
        async with self._lock:
            if self._next_producer_id >= self._producer_block_end:
                await self._save(self._topics, self._producer_block_end + 1000)
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return producer_id

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        async with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                return existing
            info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs))
            await self._save({**self._topics, name: info})
            log.info("created topic %s with %d partition(s)", name, partitions)
            return info

    async def delete_topic(self, name: str) -> TopicInfo | None:
        async with self._lock:
            info = self._topics.get(name)
            if info is None:
                return None
            topics = dict(self._topics)
            del topics[name]
            await self._save(topics)
            log.info("deleted topic %s", name)
            return info
