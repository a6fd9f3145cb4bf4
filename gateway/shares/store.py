"""Durable share-partition state: Kafka keeps it in ``__share_group_state``; here one JSON
object per share-partition in the store, in both modes (a cluster's gateways share it):
``{namespace}/~meta/shares/{group}/{topic id}/{partition}.json``, the group named as group
documents are (its id in hex, or a digest of a long one, the id then kept inside).

Every write is conditional on the version last read or written, so a gateway that lost a
partition (paused past its lease, or behind the times) cannot overwrite its new owner's
state: its write fails, and it drops what it held.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from kafscale.protocol.layout import id_object_name, id_of_object_name, meta_prefix
from kafscale.storage_backends import ObjectNotFound

from ..storage import AsyncStore
from .partition import RecordState, StateBatch

__all__ = ["StoredShare", "ShareStateStore", "ShareKey"]


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StoredShare:
    group_id: str
    topic: str  # the name when it was written, for people reading the store
    start: int
    state_epoch: int
    batches: tuple[StateBatch, ...]

    def to_json(self) -> bytes:
        return json.dumps({"group_id": self.group_id, "topic": self.topic, "start_offset": self.start,
                           "state_epoch": self.state_epoch,
                           "batches": [[b.first, b.last, int(b.state), b.deliveries] for b in self.batches]},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StoredShare:
        try:
            doc = json.loads(raw)
            batches = tuple(StateBatch(int(first), int(last), RecordState(int(state)), int(deliveries))
                            for first, last, state, deliveries in doc["batches"])
            return cls(str(doc["group_id"]), str(doc.get("topic", "")), int(doc["start_offset"]),
                       int(doc["state_epoch"]), batches)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable share-partition state: {exc!r}") from exc


class ShareStateStore:
    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._prefix = meta_prefix(namespace, "shares")

    def _group_prefix(self, group_id: str) -> str:
        return f"{self._prefix}{id_object_name(group_id)}/"

    def key(self, share: ShareKey) -> str:
        return f"{self._group_prefix(share.group_id)}{share.topic_id.hex}/{share.partition}.json"

    async def load(self, share: ShareKey) -> tuple[StoredShare, str] | None:
        """The stored state and its version; None when there is none yet.
        ValueError when it does not parse."""
        try:
            raw, version = await self._store.get_versioned(self.key(share))
        except ObjectNotFound:
            return None
        return StoredShare.from_json(raw), version

    async def save(self, share: ShareKey, state: StoredShare, version: str | None) -> str:
        """Write ``state`` over ``version`` (None: there is none yet); the new version.
        ObjectChanged / ObjectExists when another gateway wrote meanwhile."""
        if version is None:
            return await self._store.put_if_absent(self.key(share), state.to_json())
        return await self._store.put_if_unchanged(self.key(share), state.to_json(), version)

    async def stored_partitions(self, group_id: str) -> list[ShareKey]:
        prefix = self._group_prefix(group_id)
        keys = []
        for info in await self._store.list(prefix):
            topic_hex, _, name = info.key[len(prefix):].partition("/")
            if name.endswith(".json") and name[:-5].isdecimal() and _is_hex_id(topic_hex):
                keys.append(ShareKey(group_id, uuid.UUID(hex=topic_hex), int(name[:-5])))
        return keys

    async def stored_groups(self) -> set[str]:
        """The groups with any stored state (a digest-named group's id read from one of its
        documents)."""
        folders: dict[str, str] = {}
        for info in await self._store.list(self._prefix):
            if info.key.endswith(".json"):
                folders.setdefault(info.key[len(self._prefix):].split("/", 1)[0], info.key)
        groups = set()
        for name, key in folders.items():
            group_id = id_of_object_name(name)
            if group_id is None:
                try:
                    group_id = StoredShare.from_json(await self._store.get(key)).group_id
                except (ValueError, ObjectNotFound):
                    continue
            groups.add(group_id)
        return groups

    async def delete_topic(self, topic_id: uuid.UUID) -> None:
        """Every group's state of one topic (a deleted topic's), found in one listing."""
        keys = [info.key for info in await self._store.list(self._prefix)
                if info.key[len(self._prefix):].split("/")[1:2] == [topic_id.hex]]
        await self._store.delete_many(keys)

    async def delete(self, keys: list[ShareKey]) -> None:
        await self._store.delete_many([self.key(k) for k in keys])


def _is_hex_id(text: str) -> bool:
    """Whether a folder name is a topic id as this store writes them (anything else there is skipped)."""
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)
