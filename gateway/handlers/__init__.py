"""Request handlers, one module per API family; importing this package registers them all."""

from . import (  # noqa: F401
    acls,
    admin,
    api_versions,
    configs,
    consumer_groups,
    coordinator,
    fetch,
    group_admin,
    groups,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_ids,
    replicas,
    sasl,
    scram_users,
    share_fetch,
    share_groups,
    share_offsets,
    topic_partitions,
    topics,
    transactions,
)
from .base import REGISTRY, Handler, advertised_versions

__all__ = ["REGISTRY", "Handler", "advertised_versions"]
