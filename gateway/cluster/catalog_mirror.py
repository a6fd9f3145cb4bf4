"""A cluster's topic catalog, mirrored from etcd into the store, so the store describes
itself: Spark (and any reader without etcd) finds the topics, their ids, partition
counts and log starts in the bucket alone (:mod:`kafscale.protocol.catalog`).

Every gateway mirrors what its watch sees, named by the etcd revision it reflects and
created put-if-absent: gateways mirroring the same revision write the same document,
and readers take the highest. Older mirrors beyond the newest few are deleted.
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol.catalog import catalog_key, catalog_prefix, encode_catalog
from kafscale.storage_backends import ObjectExists, StorageError

from ..metadata import EtcdMetadataStore
from ..storage import AsyncStore

__all__ = ["mirror_catalog", "KEEP"]

log = logging.getLogger("kafscale.cluster.catalog")

KEEP = 3  # mirrors kept: a reader that listed one just before a change still finds it
_RETRY_S = 5.0


async def mirror_once(metadata: EtcdMetadataStore, store: AsyncStore, namespace: str) -> int:
    """Write the mirror of the catalog as now watched; returns the revision written."""
    revision = metadata.revision
    try:
        await store.put_if_absent(catalog_key(namespace, revision), encode_catalog(metadata.topics()))
    except ObjectExists:
        pass  # another gateway mirrored this revision
    mirrors = sorted(info.key for info in await store.list(catalog_prefix(namespace)))
    for key in mirrors[:-KEEP]:
        await store.delete(key)
    return revision


async def mirror_catalog(metadata: EtcdMetadataStore, store: AsyncStore, namespace: str) -> None:
    written = -1
    while True:
        if metadata.revision != written:
            try:
                written = await mirror_once(metadata, store, namespace)
            except Exception as exc:  # the store failing, or (a bug) anything else: never ends the gateway
                log.warning("mirroring the topic catalog into the store failed (retried): %s", exc,
                            exc_info=None if isinstance(exc, StorageError) else exc)
                await trio.sleep(_RETRY_S)
                continue
        changed = metadata.changed
        if metadata.revision == written:
            await changed.wait()
