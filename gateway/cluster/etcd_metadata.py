"""Cluster metadata and group state in etcd, behind the same interfaces as the embedded store.

Keys under ``{etcd_prefix}/{cluster_id}/``:

    topics/{name}                     TopicInfo JSON
    producer_id_block                 end of the last producer-id block handed out
    groups/{slot}/{hex(group id)}     StoredGroup JSON (committed offsets, generation)
    transactions/{hex(id)}            a transactional id's state (not yet served)

Every change is a compare-and-swap on the key's mod revision, so gateways
changing the same topic at once never lose each other's update.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.transactions import Transaction

from ..groups.store import LoadedGroups, StoredGroup, parse_groups, slot_of
from ..metadata import TopicInfo
from ..transactions.store import ABSENT, StoredTransaction, TransactionChanged, TransactionsUnreadable
from .etcd import Compare, EtcdClient, EtcdError, KeyValue, delete_op, put_op, range_op

__all__ = ["EtcdMetadata", "EtcdGroupStore", "EtcdTransactions", "cluster_root"]

log = logging.getLogger("kafscale.metadata")

_REWATCH_S = 1.0

PRODUCER_ID_BLOCK = 1000


def cluster_root(prefix: str, cluster_id: str) -> str:
    return f"{prefix.rstrip('/')}/{cluster_id}/"


class EtcdMetadata:
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


class EtcdGroupStore:
    """Committed offsets and generations, one key per group, grouped by coordinator slot."""

    def __init__(self, etcd: EtcdClient, root: str, slots: int) -> None:
        self._etcd = etcd
        self._prefix = root + "groups/"
        self._slots = slots

    def _key(self, group_id: str) -> str:
        return f"{self._prefix}{slot_of(group_id, self._slots)}/{group_id.encode().hex()}"

    async def load_all(self) -> LoadedGroups:
        return parse_groups([(f"etcd key {kv.key}", kv.key.rsplit("/", 1)[-1], kv.value)
                             for kv in await self._etcd.get_prefix(self._prefix)])

    async def load_slot(self, slot: int, slots: int) -> LoadedGroups:
        assert slots == self._slots, "the slot count is fixed per cluster"
        return parse_groups([(f"etcd key {kv.key}", kv.key.rsplit("/", 1)[-1], kv.value)
                             for kv in await self._etcd.get_prefix(f"{self._prefix}{slot}/")])

    async def save(self, group: StoredGroup) -> None:
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
                await trio.sleep(_REWATCH_S)

    async def delete(self, group_id: str) -> None:
        await self._etcd.delete(self._key(group_id))


class EtcdTransactions:
    """One etcd key per transactional id; every write compares the key's mod revision.

    While :meth:`watch_prepared` runs, every stored transaction is mirrored from its watch,
    so the periodic sweep lists them without reading etcd (it read every id's key each
    sweep: etcd load growing with ids x gateways, at rest). Decisions never rest on the
    mirror alone: each change reads its id's key and compares its revision."""

    def __init__(self, etcd: EtcdClient, root: str) -> None:
        self._etcd = etcd
        self._prefix = root + "transactions/"
        self._mirror: dict[str, StoredTransaction] = {}
        self._mirrored = False  # the mirror follows the watch (else list() reads etcd)

    def _key(self, transactional_id: str) -> str:
        return self._prefix + transactional_id.encode().hex()

    def _id(self, key: str) -> str:
        return bytes.fromhex(key[len(self._prefix):]).decode()

    def _stored(self, kv: KeyValue) -> StoredTransaction:
        transactional_id = self._id(kv.key)
        try:
            transaction = Transaction.from_json(transactional_id, kv.value)
        except ValueError as exc:
            raise TransactionsUnreadable(f"{kv.key}: {exc}") from exc
        return StoredTransaction(transaction, str(kv.mod_revision))

    async def get(self, transactional_id: str) -> StoredTransaction | None:
        kv = await self._etcd.get(self._key(transactional_id))
        return None if kv is None else self._stored(kv)

    async def put(self, transaction: Transaction, expected_version: str) -> str | None:
        """The new mod revision is not in the answer we read: ``None`` (read it again)."""
        key = self._key(transaction.transactional_id)
        guard = Compare(key, "CREATE", 0) if expected_version == ABSENT else Compare(key, "MOD", int(expected_version))
        done, _ = await self._etcd.txn([guard], [put_op(key, transaction.to_json())])
        if not done:
            raise TransactionChanged(transaction.transactional_id)
        return None

    async def delete(self, transactional_id: str, expected_version: str | None) -> None:
        key = self._key(transactional_id)
        guards = [] if expected_version is None else [Compare(key, "MOD", int(expected_version))]
        done, _ = await self._etcd.txn(guards, [delete_op(key)])
        if not done:
            raise TransactionChanged(transactional_id)

    async def list(self) -> list[StoredTransaction]:
        if self._mirrored:
            return list(self._mirror.values())
        return [self._stored(kv) for kv in await self._etcd.get_prefix(self._prefix)]

    def _follow(self, kv: KeyValue, deleted: bool) -> StoredTransaction | None:
        """Apply one stored change to the mirror; the transaction it stores, if readable."""
        try:
            transactional_id = self._id(kv.key)
        except ValueError:
            return None  # not one of ours
        if deleted:
            self._mirror.pop(transactional_id, None)
            return None
        try:
            stored = self._stored(kv)
        except TransactionsUnreadable as exc:
            log.error("unreadable transaction in etcd (left alone): %s", exc)
            self._mirror.pop(transactional_id, None)
            return None
        self._mirror[transactional_id] = stored
        return stored

    async def watch_prepared(self, prepared: Callable[[str], None]) -> None:
        while True:
            try:
                kvs, revision = await self._etcd.range_prefix(self._prefix)
                self._mirror = {}
                for kv in kvs:
                    self._follow(kv, deleted=False)
                self._mirrored = True
                async for events in self._etcd.watch_prefix(self._prefix, revision + 1):
                    for event in events:
                        stored = self._follow(event.kv, event.deleted)
                        if stored is not None and stored.transaction.state.preparing:
                            prepared(stored.transaction.transactional_id)
            except EtcdError as exc:  # also a broken stream: read again and re-watch
                self._mirrored = False
                log.info("watch of transactions broke (%s); watching again", exc)
                await trio.sleep(_REWATCH_S)
