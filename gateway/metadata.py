"""Cluster metadata: topics, their ids, partition counts and configs.

:class:`MetadataStore` is the interface; :class:`EmbeddedMetadataStore` keeps the
document as one JSON object in the object store itself (``{namespace}/~meta/``),
so a single gateway needs nothing but its storage; :class:`EtcdMetadataStore` keeps one
etcd key per topic (``{prefix}/{cluster_id}/topics/{name}``) and the producer-id block,
every change a compare-and-swap on the key's mod revision, for gateways of a cluster.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from typing import Protocol

import trio

from kafscale.protocol.catalog import TopicInfo, decode_catalog, encode_catalog
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import topics_key
from kafscale.storage_backends import ObjectNotFound

from .etcd import Compare, EtcdClient, KeyValue, put_op, range_op
from .storage import AsyncStore

__all__ = ["TopicInfo", "MetadataStore", "EmbeddedMetadataStore", "EtcdMetadataStore", "MetadataUnreadable", "cluster_root"]

log = logging.getLogger("kafscale.metadata")

PRODUCER_ID_BLOCK = 1000  # producer ids a gateway takes from etcd at a time


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


class EmbeddedMetadataStore:
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

    @property
    def producer_block_end(self) -> int:
        """Every producer id below this may have been handed out."""
        return self._producer_block_end

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


def cluster_root(prefix: str, cluster_id: str) -> str:
    return f"{prefix.rstrip('/')}/{cluster_id}/"


class EtcdMetadataStore:
    """Topics cached in memory, kept current by the cluster's watch on ``topics/``."""

    def __init__(self, etcd: EtcdClient, root: str) -> None:
        self._etcd = etcd
        self._topics_prefix = root + "topics/"
        self._producer_key = root + "producer_id_block"
        self._topics: dict[str, TopicInfo] = {}
        # Revision of etcd the watched catalog reflects, and an event set at each change of it.
        self.revision = 0
        self.changed = trio.Event()
        self._next_producer_id = 0
        self._producer_block_end = 0

    async def load(self) -> None:
        self.replace(await self._etcd.get_prefix(self._topics_prefix))

    def replace(self, kvs: list[KeyValue], revision: int = 0) -> None:
        """The whole topic table, as read from etcd at ``revision``."""
        self._topics = {info.name: info for info in map(self._decode, kvs)}
        self._seen(revision)

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        """One change seen on the watch of ``topics/``."""
        name = kv.key[len(self._topics_prefix):]
        if deleted:
            self._topics = {n: i for n, i in self._topics.items() if n != name}
        else:
            self._topics = {**self._topics, name: self._decode(kv)}
        self._seen(kv.mod_revision)

    def _seen(self, revision: int) -> None:
        """The watched catalog is now etcd's at ``revision`` (what the store's mirror is named by)."""
        if revision > self.revision:
            self.revision = revision
            self.changed.set()
            self.changed = trio.Event()

    def _decode(self, kv: KeyValue) -> TopicInfo:
        return TopicInfo.from_json(kv.key[len(self._topics_prefix):], json.loads(kv.value))

    def topics(self) -> dict[str, TopicInfo]:
        return self._topics

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        key = self._topics_prefix + name
        info = TopicInfo(name, uuid.uuid4(), partitions, dict(configs))
        created, responses = await self._etcd.txn(
            [Compare(key, "CREATE", 0)], [put_op(key, json.dumps(info.to_json()).encode())], [range_op(key)])
        if not created:  # another gateway created it first: that one is the topic
            info = self._decode(responses[0][0])
        else:
            log.info("created topic %s with %d partition(s)", name, partitions)
        self._topics = {**self._topics, name: info}
        return info

    async def update_topic(self, name: str, *, partitions: int | None = None,
                           configs: dict[str, str] | None = None,
                           log_start: dict[int, int] | None = None) -> TopicInfo:
        key = self._topics_prefix + name
        while True:
            current = await self._etcd.get(key)
            if current is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
            info = self._decode(current)
            updated = TopicInfo(
                name, info.topic_id, info.partitions if partitions is None else partitions,
                dict(info.configs if configs is None else configs), {**info.log_start, **(log_start or {})},
            )
            done, _ = await self._etcd.txn([Compare(key, "MOD", current.mod_revision)],
                                           [put_op(key, json.dumps(updated.to_json()).encode())])
            if done:
                self._topics = {**self._topics, name: updated}
                return updated

    async def delete_topic(self, name: str) -> TopicInfo | None:
        current = await self._etcd.get(self._topics_prefix + name)
        if current is None:
            return None
        await self._etcd.delete(current.key)
        self._topics = {n: i for n, i in self._topics.items() if n != name}
        log.info("deleted topic %s", name)
        return self._decode(current)

    async def adopt(self, topics: Iterable[TopicInfo], producer_block_end: int) -> None:
        """Take a lone gateway's catalog as it is (topic ids, configs, log starts), before any
        gateway of the cluster runs: a topic already here is kept, and no producer id below
        ``producer_block_end`` is handed out again. Repeatable."""
        for info in topics:
            key = self._topics_prefix + info.name
            await self._etcd.txn([Compare(key, "CREATE", 0)], [put_op(key, json.dumps(info.to_json()).encode())])
        while True:
            current = await self._etcd.get(self._producer_key)
            if current is not None and int(current.value) >= producer_block_end:
                break
            guard = Compare(self._producer_key, "MOD", current.mod_revision) if current \
                else Compare(self._producer_key, "CREATE", 0)
            done, _ = await self._etcd.txn([guard], [put_op(self._producer_key, str(producer_block_end).encode())])
            if done:
                break

    async def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_block_end:
            # Claim the next block for this gateway alone (compare-and-swap on its end).
            while True:
                current = await self._etcd.get(self._producer_key)
                start = int(current.value) if current else 0
                guard = Compare(self._producer_key, "MOD", current.mod_revision) if current \
                    else Compare(self._producer_key, "CREATE", 0)
                done, _ = await self._etcd.txn([guard], [put_op(self._producer_key,
                                                                str(start + PRODUCER_ID_BLOCK).encode())])
                if done:
                    self._next_producer_id, self._producer_block_end = start, start + PRODUCER_ID_BLOCK
                    break
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        if producer_id > 2**63 - 2:
            raise KafkaError(ErrorCode.unknown_server_error, "producer ids exhausted")
        return producer_id
