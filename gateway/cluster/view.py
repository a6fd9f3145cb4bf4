"""The cluster as etcd has it — live gateways, owners, topics — kept in memory by watches.

Each part (``brokers/``, ``owners/``, ``topics/``, and the parts others keep: ``security/``,
``group-configs/``) is read once, then followed
with a streaming watch from the revision it was read at; a broken stream is read
again and re-watched. Nothing here decides anything: the membership reacts to
``on_change``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from ..etcd import EtcdClient, EtcdError, KeyValue
from ..metadata import EtcdMetadataStore
from ..ownership import Broker


class FollowedPart(Protocol):
    """A part of the cluster state kept by its owner (credentials and ACLs, group configs):
    read whole, then changed key by key."""

    def replace(self, kvs: list[KeyValue]) -> None: ...
    def apply(self, kv: KeyValue, deleted: bool) -> None: ...

__all__ = ["ClusterView", "FollowedPart", "Owner", "BROKERS", "OWNERS", "TOPICS", "SECURITY"]

log = logging.getLogger("kafscale.cluster")

BROKERS, OWNERS, TOPICS, SECURITY = "brokers/", "owners/", "topics/", "security/"


@dataclass(frozen=True, slots=True)
class Owner:
    node_id: int
    epoch: int
    lease: int


class ClusterView:
    def __init__(self, etcd: EtcdClient, root: str, metadata: EtcdMetadataStore, followed: dict[str, FollowedPart],
                 on_change: Callable[[], None], retry_s: float) -> None:
        """``followed``: the parts kept by others, by their prefix under ``root``."""
        self._etcd = etcd
        self._root = root
        self._metadata = metadata  # holds the topics part
        self._on_change = on_change
        self._retry_s = retry_s
        self.brokers: dict[int, Broker] = {}
        self.owners: dict[tuple[str, int], Owner] = {}
        self._followed = followed
        self._parts = (BROKERS, OWNERS, TOPICS, *followed)

    async def read_all(self) -> None:
        for part in self._parts:
            await self._read(part)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for part in self._parts:
                nursery.start_soon(self._follow, part)

    async def _read(self, part: str) -> int:
        kvs, revision = await self._etcd.range_prefix(self._root + part)
        if part == BROKERS:
            self.brokers = dict(self._parsed(self._broker, kvs))
        elif part == OWNERS:
            self.owners = dict(self._parsed(self._owner, kvs))
        elif part == TOPICS:
            self._metadata.replace(kvs, revision)
        else:
            self._followed[part].replace(kvs)
        return revision

    @staticmethod
    def _parsed(parse, kvs: list[KeyValue]) -> list:
        """Each key parsed; one that does not parse (written by hand, damaged) is skipped,
        named in the log, and holds up no other."""
        found = []
        for kv in kvs:
            try:
                found.append(parse(kv))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                log.error("etcd key %s is unreadable (skipped): %r", kv.key, exc)
        return found

    def _apply(self, part: str, kv: KeyValue, deleted: bool) -> None:
        try:
            self._apply_one(part, kv, deleted)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.error("etcd key %s is unreadable (skipped): %r", kv.key, exc)

    def _apply_one(self, part: str, kv: KeyValue, deleted: bool) -> None:
        if part == TOPICS:
            self._metadata.apply(kv, deleted)
        elif part in self._followed:
            self._followed[part].apply(kv, deleted)
        elif part == BROKERS:
            if deleted:
                self.brokers.pop(self._node_id(kv), None)
            else:
                node_id, broker = self._broker(kv)
                self.brokers[node_id] = broker
        elif deleted:
            self.owners.pop(self._unit(kv), None)
        else:
            unit, owner = self._owner(kv)
            self.owners[unit] = owner

    async def _follow(self, part: str) -> None:
        failing = False
        while True:
            try:
                revision = await self._read(part)
                self._on_change()
                if failing:
                    log.info("watching %s again", part)
                failing = False
                async for events in self._etcd.watch_prefix(self._root + part, revision + 1):
                    for event in events:
                        self._apply(part, event.kv, event.deleted)
                    self._on_change()
            except Exception as exc:  # etcd failing, or (a bug) anything else: this loop never ends the gateway
                if not failing:
                    log.warning("watch of %s stopped (%s); reading it again", part, exc,
                                exc_info=None if isinstance(exc, EtcdError) else exc)
                failing = True
                await trio.sleep(self._retry_s)

    @staticmethod
    def _node_id(kv: KeyValue) -> int:
        return int(kv.key.rsplit("/", 1)[1])

    def _broker(self, kv: KeyValue) -> tuple[int, Broker]:
        data = json.loads(kv.value)
        node_id = self._node_id(kv)
        endpoints = tuple((str(name), str(host), int(port)) for name, host, port in data.get("listeners", []))
        return node_id, Broker(node_id, data["host"], int(data["port"]), endpoints, bool(data.get("draining")))

    def _unit(self, kv: KeyValue) -> tuple[str, int]:
        topic, _, partition = kv.key[len(self._root + OWNERS):].rpartition("/")
        return topic, int(partition)

    def _owner(self, kv: KeyValue) -> tuple[tuple[str, int], Owner]:
        data = json.loads(kv.value)
        return self._unit(kv), Owner(int(data["node"]), int(data["epoch"]), kv.lease)
