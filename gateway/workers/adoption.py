"""Workers on a directory a lone gateway used: its state taken into their coordination store.

A lone gateway keeps its catalog, groups (with their committed offsets), group configs,
transactions, SCRAM users and ACLs in the store; workers keep them in their coordination
store, as a cluster keeps them in etcd. Before the first worker starts on such a
directory, the parent copies each into the coordination store with the cluster's own
stores (topic ids, configs and log starts as they were; no producer id handed out again).
What both modes keep in the store stays where it is: the log, share-group state, LFS
objects. The log is then the cluster's to take over, as from a gateway that died.

The copy is marked begun and done in the coordination store, so a parent killed midway
copies again at its next start; a directory the workers began themselves is never copied
into (a stale catalog mirror there must not bring back a deleted topic).
"""

from __future__ import annotations

import logging
from enum import Enum
from pathlib import Path

from kafscale.protocol.layout import log_prefix, meta_prefix

from ..config import GatewayConfig
from ..etcd import EtcdClient
from ..groups.configs import EmbeddedGroupConfigs, EtcdGroupConfigs
from ..groups.store import EmbeddedGroupStore, EtcdGroupStore
from ..metadata import EmbeddedMetadataStore, EtcdMetadataStore, cluster_root
from ..security.store import EmbeddedSecurityStore, EtcdSecurityStore
from ..storage import AsyncStore
from ..transactions.store import ABSENT, EmbeddedTransactionStore, EtcdTransactionStore, TransactionChanged

__all__ = ["AdoptionRefused", "Adoption", "a_lone_gateway_ran_in", "adopt_lone_gateway"]

log = logging.getLogger("kafscale.workers")

_MARK = "adopted-lone-gateway"  # under the cluster's root: "begun", then "done"


class AdoptionRefused(Exception):
    """The lone gateway's state cannot be taken as it is; the message says what to repair."""


class Adoption(Enum):
    NOTHING = "nothing"  # no lone gateway's state here, or the workers' own directory
    DONE = "done"  # copied now


def a_lone_gateway_ran_in(root: Path, namespace: str) -> bool:
    """Whether ``root`` (a filesystem store) holds a gateway's catalog or log."""
    held = [root / prefix for prefix in (meta_prefix(namespace), log_prefix(namespace))]
    return any(folder.is_dir() and any(folder.iterdir()) for folder in held)


async def adopt_lone_gateway(config: GatewayConfig, store: AsyncStore, etcd: EtcdClient, lone_data: bool) -> Adoption:
    """Copy a lone gateway's state from ``store`` into the coordination store behind ``etcd``
    when it is there to copy (``lone_data``) and the coordination store is new, or when an
    earlier copy was cut short."""
    root = cluster_root(config.cluster.etcd_prefix, config.network.cluster_id)
    mark = root + _MARK
    begun = await etcd.get(mark)
    if begun is not None and begun.value == b"done":
        return Adoption.NOTHING
    if begun is None:
        if not lone_data or await etcd.get_prefix(root):
            return Adoption.NOTHING  # nothing to copy, or the workers' own store
        await etcd.put(mark, b"begun")
    namespace = config.storage.namespace
    counts: dict[str, int] = {}

    catalog = EmbeddedMetadataStore(store, namespace)
    await catalog.load()
    await EtcdMetadataStore(etcd, root).adopt(catalog.topics().values(), catalog.producer_block_end)
    counts["topics"] = len(catalog.topics())

    groups = await EmbeddedGroupStore(store, namespace).load_all()
    if groups.damaged:
        raise AdoptionRefused("the lone gateway's stored groups are unreadable, so they cannot be taken over: "
                              + "; ".join(f"{group}: {why}" for group, why in sorted(groups.damaged.items())))
    cluster_groups = EtcdGroupStore(etcd, root, config.cluster.coordinator_slots, lease=lambda: 0)
    for group in groups.groups:
        await cluster_groups.adopt(group)
    counts["groups"] = len(groups.groups)

    group_configs = EmbeddedGroupConfigs(store, namespace)
    await group_configs.load()
    cluster_configs = EtcdGroupConfigs(etcd, root)
    every_config = group_configs.every()
    for group_id, configs in every_config.items():
        await cluster_configs.set(group_id, configs)
    counts["group configs"] = len(every_config)

    transactions = await EmbeddedTransactionStore(store, namespace).list()
    cluster_transactions = EtcdTransactionStore(etcd, root)
    for stored in transactions:
        try:
            await cluster_transactions.put(stored.transaction, ABSENT)
        except TransactionChanged:
            pass  # copied by the run that was cut short
    counts["transactional ids"] = len(transactions)

    security = EmbeddedSecurityStore(store, namespace)
    await security.load()
    cluster_security = EtcdSecurityStore(etcd, root)
    for user, mechanisms in security.users.items():
        await cluster_security.alter_user(user, upsert=mechanisms.values())
    await cluster_security.add_acls(list(security.acls.values()))
    counts["SCRAM users"], counts["ACLs"] = len(security.users), len(security.acls)

    await etcd.put(mark, b"done")
    log.info("took over the state of the gateway that ran alone here: %s",
             ", ".join(f"{count} {what}" for what, count in counts.items()))
    return Adoption.DONE
