"""Where each transactional id's state is kept, and the guarded write that decides it.

Every change of a transaction is a compare-and-swap on the version that was read, so
two coordinators (a paused former one and the new one) can never both move one
transaction: the one that read the older version fails with
:class:`TransactionChanged` and reads again. Alone, a gateway keeps one object per
transactional id in the store (``{namespace}/~meta/transactions/{id hex}.json``,
put-if-absent and put-if-unchanged); in a cluster, one etcd key per id
(:class:`EtcdTransactionStore`, below), compared on its mod revision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from kafscale.protocol.layout import DIGEST_NAME_PREFIX, id_object_name, id_of_object_name, meta_prefix
from kafscale.protocol.transactions import Transaction
from kafscale.storage_backends import ObjectChanged, ObjectExists, ObjectNotFound

from ..etcd import REWATCH_S, Compare, EtcdClient, EtcdError, KeyValue, delete_op, put_op
from ..storage import AsyncStore

__all__ = ["StoredTransaction", "TransactionStore", "TransactionChanged", "EmbeddedTransactionStore",
           "TransactionsUnreadable", "ABSENT", "EtcdTransactionStore"]

log = logging.getLogger("kafscale.transactions")

ABSENT = ""  # the version of a transactional id never stored


class TransactionChanged(Exception):
    """Another coordinator changed the transaction since it was read."""


class TransactionsUnreadable(RuntimeError):
    """A stored transaction state does not parse."""


@dataclass(frozen=True, slots=True)
class StoredTransaction:
    transaction: Transaction
    version: str  # opaque: what the next guarded write compares


class TransactionStore(Protocol):
    async def get(self, transactional_id: str) -> StoredTransaction | None: ...
    async def put(self, transaction: Transaction, expected_version: str) -> str | None:
        """Store ``transaction`` if its stored version is still ``expected_version``
        (``ABSENT``: never stored), else raise :class:`TransactionChanged`. Returns the
        new version when the store says it in its answer (never guessed: ``None`` and
        the next change reads it)."""
        ...
    async def list(self) -> list[StoredTransaction]: ...
    async def delete(self, transactional_id: str, expected_version: str | None) -> None:
        """Delete the id's state if its stored version is still ``expected_version`` (``None``:
        not known, deleted as it is), else raise :class:`TransactionChanged`."""
        ...
    async def watch_prepared(self, prepared: Callable[[str], None]) -> None:
        """Run until cancelled, calling ``prepared`` with each transactional id another
        gateway moves to PREPARE_* (so this one writes its markers at once)."""
        ...


class EmbeddedTransactionStore:
    """One object per transactional id, written with the store's conditional writes."""

    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._prefix = meta_prefix(namespace, "transactions")

    def _key(self, transactional_id: str) -> str:
        return f"{self._prefix}{id_object_name(transactional_id)}.json"

    def _decode(self, transactional_id: str | None, raw: bytes, key: str) -> Transaction:
        try:
            return Transaction.from_json(transactional_id, raw)
        except ValueError as exc:
            raise TransactionsUnreadable(f"{key}: {exc}") from exc

    async def get(self, transactional_id: str) -> StoredTransaction | None:
        key = self._key(transactional_id)
        try:
            raw, version = await self._store.get_versioned(key)
        except ObjectNotFound:
            return None
        return StoredTransaction(self._decode(transactional_id, raw, key), version)

    async def put(self, transaction: Transaction, expected_version: str) -> str | None:
        key = self._key(transaction.transactional_id)
        try:
            if expected_version == ABSENT:
                version = await self._store.put_if_absent(key, transaction.to_json())
            else:
                version = await self._store.put_if_unchanged(key, transaction.to_json(), expected_version)
        except (ObjectExists, ObjectChanged) as exc:
            raise TransactionChanged(transaction.transactional_id) from exc
        return version or None

    async def delete(self, transactional_id: str, expected_version: str | None) -> None:
        """Alone, the coordinator is the only writer and holds the id's lock: a plain delete."""
        await self._store.delete(self._key(transactional_id))

    async def watch_prepared(self, prepared: Callable[[str], None]) -> None:
        """Alone, every transaction is prepared by this gateway, which finishes it itself."""
        await trio.sleep_forever()

    async def list(self) -> list[StoredTransaction]:
        """Every stored transaction; one an earlier version named by a hex key too long for
        some stores is moved to its digest name on the way."""
        found = []
        for info in await self._store.list(self._prefix):
            name = info.key[len(self._prefix):].removesuffix(".json")
            if id_of_object_name(name) is None and not name.startswith(DIGEST_NAME_PREFIX):
                continue  # not one of ours
            try:
                raw, version = await self._store.get_versioned(info.key)
            except ObjectNotFound:
                continue
            transaction = self._decode(id_of_object_name(name), raw, info.key)
            key = self._key(transaction.transactional_id)
            if key != info.key:
                try:
                    version = await self._store.put_if_absent(key, raw)
                except ObjectExists:  # moved already (a run stopped before the delete)
                    raw, version = await self._store.get_versioned(key)
                    transaction = self._decode(transaction.transactional_id, raw, key)
                await self._store.delete(info.key)
            found.append(StoredTransaction(transaction, version))
        return found


class EtcdTransactionStore:
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
                await trio.sleep(REWATCH_S)
