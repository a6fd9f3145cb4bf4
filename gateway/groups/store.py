"""Durable group state: committed offsets and the generation, one JSON object per group.

Objects live under ``{namespace}/~meta/groups/`` named by the hex of the group id
(group ids may hold any character). Members are not persisted: after a restart
their heartbeats get UNKNOWN_MEMBER_ID and they rejoin, as after a coordinator
move in Kafka.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field

from kafscale.protocol.layout import META_PREFIX

from ..storage import AsyncStore

__all__ = ["GroupStore", "StoredGroup", "CommittedOffset", "slot_of"]


def slot_of(group_id: str, slots: int) -> int:
    """The coordinator slot of a group: its owner gateway coordinates the group."""
    return zlib.crc32(group_id.encode()) % slots


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_ms: int = 0


@dataclass
class StoredGroup:
    group_id: str
    generation: int = 0
    protocol_type: str | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    def to_json(self) -> bytes:
        topics: dict[str, dict[str, list]] = {}
        for (topic, partition), item in sorted(self.offsets.items()):
            topics.setdefault(topic, {})[str(partition)] = [
                item.offset, item.leader_epoch, item.metadata, item.commit_ms
            ]
        return json.dumps({
            "group_id": self.group_id, "generation": self.generation,
            "protocol_type": self.protocol_type, "offsets": topics,
        }).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StoredGroup:
        document = json.loads(raw)
        offsets = {
            (topic, int(partition)): CommittedOffset(*values)
            for topic, partitions in document.get("offsets", {}).items()
            for partition, values in partitions.items()
        }
        return cls(document["group_id"], int(document.get("generation", 0)),
                   document.get("protocol_type"), offsets)


class GroupStore:
    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._prefix = f"{namespace}/{META_PREFIX}/groups/"

    def _key(self, group_id: str) -> str:
        return self._prefix + group_id.encode().hex() + ".json"

    async def load_all(self) -> list[StoredGroup]:
        groups = []
        for info in await self._store.list(self._prefix):
            if info.key.endswith(".json"):
                groups.append(StoredGroup.from_json(await self._store.get(info.key)))
        return groups

    async def load_slot(self, slot: int, slots: int) -> list[StoredGroup]:
        return [group for group in await self.load_all() if slot_of(group.group_id, slots) == slot]

    async def save(self, group: StoredGroup) -> None:
        await self._store.put(self._key(group.group_id), group.to_json())

    async def delete(self, group_id: str) -> None:
        await self._store.delete(self._key(group_id))
