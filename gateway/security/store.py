"""Where SCRAM credentials and ACLs live: the metadata store, embedded or etcd.

Both keep the whole state in memory (it is small and read on every request) and
call ``on_change`` after each change, wherever it came from; in a cluster the
etcd watch of ``security/`` brings other gateways' changes within moments.

Embedded: one JSON object ``{namespace}/~meta/security.json``, rewritten whole.
etcd, under ``{prefix}/{cluster}/security/``:

    users/{hex(user)}          {mechanism: salted credential}
    acls/{sha256(binding)}     the binding
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable

import trio

from kafscale.protocol.layout import security_key
from kafscale.storage_backends import ObjectNotFound

from ..etcd import Compare, EtcdClient, KeyValue, delete_op, put_op
from ..metadata import MetadataUnreadable
from ..storage import AsyncStore
from .acl import AclBinding
from .scram import ScramCredential

__all__ = ["SecurityStore", "EmbeddedSecurityStore", "EtcdSecurityStore", "SECURITY"]

log = logging.getLogger("kafscale.security")

SECURITY = "security/"
_USERS, _ACLS = "users/", "acls/"
_TXN_OPS = 100

Credentials = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


def _acl_id(acl: AclBinding) -> str:
    return hashlib.sha256(json.dumps(acl.to_json()).encode()).hexdigest()[:32]


def _user_json(mechanisms: dict[str, ScramCredential]) -> dict:
    return {mechanism: credential.to_json() for mechanism, credential in sorted(mechanisms.items())}


def _user_from_json(data: dict) -> dict[str, ScramCredential]:
    return {mechanism: ScramCredential.from_json(mechanism, value) for mechanism, value in data.items()}


class SecurityStore:
    """The state both implementations share; subclasses persist changes."""

    def __init__(self) -> None:
        self.users: Credentials = {}
        self.acls: dict[str, AclBinding] = {}  # by id
        self.on_change: Callable[[], None] = lambda: None

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    async def load(self) -> None:
        raise NotImplementedError

    async def alter_user(self, user: str, upsert: Iterable[ScramCredential] = (),
                         delete: Iterable[str] = ()) -> None:
        """Set and remove one user's credentials (by mechanism) in one change."""
        raise NotImplementedError

    async def add_acls(self, acls: list[AclBinding]) -> None:
        raise NotImplementedError

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        raise NotImplementedError

    def _changed(self) -> None:
        self.on_change()


class EmbeddedSecurityStore(SecurityStore):
    """A single gateway's credentials and ACLs, one object in its store."""

    def __init__(self, store: AsyncStore, namespace: str) -> None:
        super().__init__()
        self._store = store
        self._key = security_key(namespace)
        self._lock = trio.Lock()

    async def load(self) -> None:
        try:
            raw = await self._store.get(self._key)
        except ObjectNotFound:
            return
        try:
            document = json.loads(raw)
            self.users = {user: _user_from_json(data) for user, data in document.get("users", {}).items()}
            self.acls = {_acl_id(acl): acl for acl in map(AclBinding.from_json, document.get("acls", []))}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MetadataUnreadable(f"security object {self._key} is unreadable: {exc}") from exc
        self._changed()

    async def _save(self, users: Credentials, acls: dict[str, AclBinding]) -> None:
        document = {"users": {user: _user_json(m) for user, m in sorted(users.items())},
                    "acls": [acl.to_json() for _, acl in sorted(acls.items())]}
        await self._store.put(self._key, json.dumps(document, indent=1).encode())
        self.users, self.acls = users, acls
        self._changed()

    async def alter_user(self, user: str, upsert: Iterable[ScramCredential] = (),
                         delete: Iterable[str] = ()) -> None:
        async with self._lock:
            mechanisms = dict(self.users.get(user, {}))
            for mechanism in delete:
                mechanisms.pop(mechanism, None)
            mechanisms.update((credential.mechanism, credential) for credential in upsert)
            users = {name: m for name, m in self.users.items() if name != user}
            if mechanisms:
                users[user] = mechanisms
            await self._save(users, self.acls)

    async def add_acls(self, acls: list[AclBinding]) -> None:
        async with self._lock:
            await self._save(self.users, {**self.acls, **{_acl_id(acl): acl for acl in acls}})

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        async with self._lock:
            gone = {_acl_id(acl) for acl in acls}
            await self._save(self.users, {key: acl for key, acl in self.acls.items() if key not in gone})


class EtcdSecurityStore(SecurityStore):
    """A cluster's credentials and ACLs, one etcd key each, followed by the cluster view."""

    def __init__(self, etcd: EtcdClient, root: str) -> None:
        super().__init__()
        self._etcd = etcd
        self.prefix = root + SECURITY

    async def load(self) -> None:
        self.replace(await self._etcd.get_prefix(self.prefix))

    def replace(self, kvs: list[KeyValue]) -> None:
        users: Credentials = {}
        acls: dict[str, AclBinding] = {}
        for kv in kvs:
            self._put(kv, users, acls)
        self.users, self.acls = users, acls
        self._changed()

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        """One change seen on the watch of ``security/``."""
        users, acls = dict(self.users), dict(self.acls)
        name = kv.key[len(self.prefix):]
        if deleted:
            if name.startswith(_USERS):
                users.pop(self._user_of(name), None)
            elif name.startswith(_ACLS):
                acls.pop(name[len(_ACLS):], None)
        else:
            self._put(kv, users, acls)
        self.users, self.acls = users, acls
        self._changed()

    def _user_of(self, name: str) -> str:
        return bytes.fromhex(name[len(_USERS):]).decode()

    def _put(self, kv: KeyValue, users: Credentials, acls: dict[str, AclBinding]) -> None:
        name = kv.key[len(self.prefix):]
        try:
            if name.startswith(_USERS):
                users[self._user_of(name)] = _user_from_json(json.loads(kv.value))
            elif name.startswith(_ACLS):
                acls[name[len(_ACLS):]] = AclBinding.from_json(json.loads(kv.value))
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring unreadable security entry %s: %s", kv.key, exc)

    async def alter_user(self, user: str, upsert: Iterable[ScramCredential] = (),
                         delete: Iterable[str] = ()) -> None:
        key = self.prefix + _USERS + user.encode().hex()
        upsert, delete = list(upsert), list(delete)
        while True:  # compare-and-swap on the user's key: concurrent changes never lose one another
            current = await self._etcd.get(key)
            mechanisms = _user_from_json(json.loads(current.value)) if current else {}
            for mechanism in delete:
                mechanisms.pop(mechanism, None)
            mechanisms.update((credential.mechanism, credential) for credential in upsert)
            guard = Compare(key, "MOD", current.mod_revision) if current else Compare(key, "CREATE", 0)
            change = put_op(key, json.dumps(_user_json(mechanisms)).encode()) if mechanisms else delete_op(key)
            done, _ = await self._etcd.txn([guard], [change])
            if done:
                users = {name: m for name, m in self.users.items() if name != user}
                if mechanisms:
                    users[user] = mechanisms
                self.users = users
                self._changed()
                return

    async def add_acls(self, acls: list[AclBinding]) -> None:
        if acls:
            for start in range(0, len(acls), _TXN_OPS):  # etcd refuses transactions of more than 128 operations
                await self._etcd.txn([], [put_op(self.prefix + _ACLS + _acl_id(acl), json.dumps(acl.to_json()).encode())
                                          for acl in acls[start:start + _TXN_OPS]])
            self.acls = {**self.acls, **{_acl_id(acl): acl for acl in acls}}
            self._changed()

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        if acls:
            for start in range(0, len(acls), _TXN_OPS):
                await self._etcd.txn([], [delete_op(self.prefix + _ACLS + _acl_id(acl)) for acl in acls[start:start + _TXN_OPS]])
            gone = {_acl_id(acl) for acl in acls}
            self.acls = {key: acl for key, acl in self.acls.items() if key not in gone}
            self._changed()
