"""Durable group state: committed offsets and the generation, one JSON object per group.

Alone (:class:`EmbeddedGroupStore`), objects live under ``{namespace}/~meta/groups/``
named by the hex of the group id, or a digest of a long one (group ids may hold any
character); in a cluster (:class:`EtcdGroupStore`), one etcd key per group under its
coordinator slot. Members are not persisted: after a restart their heartbeats get
UNKNOWN_MEMBER_ID and they rejoin, as after a coordinator move in Kafka.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import id_object_name, id_of_object_name, meta_prefix

from ..etcd import REWATCH_S, Compare, EtcdClient, EtcdError, KeyValue, delete_op, put_op
from ..ownership import GROUP_UNIT
from ..storage import AsyncStore

__all__ = ["GroupStore", "EmbeddedGroupStore", "StoredGroup", "CommittedOffset", "LoadedGroups", "parse_groups", "slot_of", "EtcdGroupStore"]

log = logging.getLogger("kafscale.groups")


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
    kind: str = "classic"  # or "consumer": the protocol its members speak (KIP-848)
    # A consumer-protocol group's members, epochs and assignments (ConsumerGroup.snapshot),
    # so a new coordinator carries on where the last one answered; classic members are not kept.
    membership: dict | None = None

    def to_json(self) -> bytes:
        topics: dict[str, dict[str, list]] = {}
        for (topic, partition), item in sorted(self.offsets.items()):
            topics.setdefault(topic, {})[str(partition)] = [
                item.offset, item.leader_epoch, item.metadata, item.commit_ms
            ]
        return json.dumps({
            "group_id": self.group_id, "generation": self.generation,
            "protocol_type": self.protocol_type, "offsets": topics, "kind": self.kind,
            **({"membership": self.membership} if self.membership is not None else {}),
        }).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> StoredGroup:
        document = json.loads(raw)
        offsets = {
            (topic, int(partition)): CommittedOffset(*values)
            for topic, partitions in document.get("offsets", {}).items()
            for partition, values in partitions.items()
        }
        membership = document.get("membership")
        if membership is not None and not isinstance(membership, dict):
            raise TypeError("membership is not an object")
        return cls(document["group_id"], int(document.get("generation", 0)),
                   document.get("protocol_type"), offsets, str(document.get("kind", "classic")), membership)


@dataclass
class LoadedGroups:
    groups: list[StoredGroup] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)  # group id -> why its stored state is unreadable


def parse_groups(documents: list[tuple[str, str, bytes]]) -> LoadedGroups:
    """Stored groups from ``(where it is stored, object name, document)`` (the name: the group
    id in hex, or a digest of it); one that does not parse is set aside by its id (or its
    name, when that does not spell one), so it damages no other group, and its reason names
    where it is stored, so an operator can repair or remove it."""
    loaded = LoadedGroups()
    for where, name, raw in documents:
        spelled = id_of_object_name(name)
        group_id = name if spelled is None else spelled
        try:
            group = StoredGroup.from_json(raw)
            if spelled is not None and group.group_id != spelled:
                raise ValueError(f"it names group {group.group_id!r}")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # json.JSONDecodeError is a ValueError
            loaded.damaged[group_id] = f"{where}: {type(exc).__name__}: {exc}"
            continue
        loaded.groups.append(group)
    return loaded


class GroupStore(Protocol):
    """Where a coordinator keeps its groups' committed state: the store alone, etcd in a cluster."""

    async def load_all(self) -> LoadedGroups: ...
    async def load_slot(self, slot: int, slots: int) -> LoadedGroups: ...
    async def save(self, group: StoredGroup) -> None: ...
    async def delete(self, group_id: str) -> None: ...


class EmbeddedGroupStore:
    """A lone gateway's groups: one object each in its store."""

    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._prefix = meta_prefix(namespace, "groups")

    def _key(self, group_id: str) -> str:
        return self._prefix + id_object_name(group_id) + ".json"

    async def load_all(self) -> LoadedGroups:
        """Every stored group; one an earlier version named by a hex key too long for some
        stores is moved to its digest name on the way."""
        documents = []
        listed = set()
        for info in await self._store.list(self._prefix):
            if info.key.endswith(".json"):
                listed.add(info.key)
                documents.append((info.key, info.key[len(self._prefix):-len(".json")], await self._store.get(info.key)))
        loaded = parse_groups(documents)
        for group in loaded.groups:
            old = self._prefix + group.group_id.encode().hex() + ".json"
            if old in listed and old != self._key(group.group_id):
                await self.save(group)
                await self._store.delete(old)
        return loaded

    async def load_slot(self, slot: int, slots: int) -> LoadedGroups:
        loaded = await self.load_all()
        return LoadedGroups([g for g in loaded.groups if slot_of(g.group_id, slots) == slot],
                            {g: why for g, why in loaded.damaged.items() if slot_of(g, slots) == slot})

    async def save(self, group: StoredGroup) -> None:
        await self._store.put(self._key(group.group_id), group.to_json())

    async def delete(self, group_id: str) -> None:
        await self._store.delete(self._key(group_id))


class EtcdGroupStore:
    """Committed offsets and generations, one key per group, grouped by coordinator slot.

    Every write is fenced: it lands only while this gateway's lease (``lease()``) holds the
    owner key of the group's slot, so a coordinator that was paused past its lease and wakes
    up believing it still coordinates cannot write its older state over the new
    coordinator's (its write is refused: NOT_COORDINATOR, and the client goes to the new one).
    """

    def __init__(self, etcd: EtcdClient, root: str, slots: int, lease: Callable[[], int]) -> None:
        self._etcd = etcd
        self._prefix = root + "groups/"
        self._owners = root + "owners/" + GROUP_UNIT + "/"
        self._slots = slots
        self._lease = lease

    def _key(self, group_id: str) -> str:
        return f"{self._prefix}{slot_of(group_id, self._slots)}/{group_id.encode().hex()}"

    async def load_all(self) -> LoadedGroups:
        return parse_groups([(f"etcd key {kv.key}", kv.key.rsplit("/", 1)[-1], kv.value)
                             for kv in await self._etcd.get_prefix(self._prefix)])

    async def load_slot(self, slot: int, slots: int) -> LoadedGroups:
        assert slots == self._slots, "the slot count is fixed per cluster"
        return parse_groups([(f"etcd key {kv.key}", kv.key.rsplit("/", 1)[-1], kv.value)
                             for kv in await self._etcd.get_prefix(f"{self._prefix}{slot}/")])

    async def _fenced(self, group_id: str, operation: dict) -> None:
        owner = self._owners + str(slot_of(group_id, self._slots))
        done, _ = await self._etcd.txn([Compare(owner, "LEASE", self._lease())], [operation])
        if not done:
            raise KafkaError(ErrorCode.not_coordinator,
                             f"this gateway no longer coordinates {group_id!r} (its slot's owner key is not under "
                             "its lease): nothing written")

    async def save(self, group: StoredGroup) -> None:
        await self._fenced(group.group_id, put_op(self._key(group.group_id), group.to_json()))

    async def adopt(self, group: StoredGroup) -> None:
        """A lone gateway's group, stored before any coordinator of the cluster runs (so not
        fenced: no slot has an owner yet)."""
        await self._etcd.put(self._key(group.group_id), group.to_json())

    def _state(self, kv: KeyValue, deleted: bool) -> tuple[str, StoredGroup | None] | None:
        try:
            group_id = bytes.fromhex(kv.key.rsplit("/", 1)[-1]).decode()
            return group_id, None if deleted else StoredGroup.from_json(kv.value)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("etcd key %s is unreadable (skipped): %r", kv.key, exc)
            return None

    async def follow(self, changed: Callable[[str, StoredGroup | None], None]) -> None:
        """Every group's state, then every change, through a watch (all again after it broke)."""
        while True:
            try:
                kvs, revision = await self._etcd.range_prefix(self._prefix)
                for kv in kvs:
                    if (found := self._state(kv, deleted=False)) is not None:
                        changed(*found)
                async for events in self._etcd.watch_prefix(self._prefix, revision + 1):
                    for event in events:
                        if (found := self._state(event.kv, event.deleted)) is not None:
                            changed(*found)
            except EtcdError as exc:
                log.info("watch of the groups broke (%s); watching again", exc)
                await trio.sleep(REWATCH_S)

    async def delete(self, group_id: str) -> None:
        await self._fenced(group_id, delete_op(self._key(group_id)))
