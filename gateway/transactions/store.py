"""Where each transactional id's state is kept, and the guarded write that decides it.

Every change of a transaction is a compare-and-swap on the version that was read, so
two coordinators (a paused former one and the new one) can never both move one
transaction: the one that read the older version fails with
:class:`TransactionChanged` and reads again. Alone, a gateway keeps one object per
transactional id in the store (``{namespace}/~meta/transactions/{id hex}.json``,
put-if-absent and put-if-unchanged); in a cluster, one etcd key per id
(``cluster/etcd_metadata.py``), compared on its mod revision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from kafscale.protocol.layout import DIGEST_NAME_PREFIX, id_object_name, id_of_object_name, meta_prefix
from kafscale.protocol.transactions import Transaction
from kafscale.storage_backends import ObjectChanged, ObjectExists, ObjectNotFound

from ..storage import AsyncStore

__all__ = ["StoredTransaction", "TransactionStore", "TransactionChanged", "EmbeddedTransactions",
           "TransactionsUnreadable", "ABSENT"]

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


class EmbeddedTransactions:
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
