"""A small blocking Kafka client built on :mod:`kafscale.protocol`: what the Spark sink and
the Spark source's progress commits need (idempotent and transactional produce, ending a
transaction from another process, committing and fetching a group's offsets).

Blocking on purpose: it runs in Spark's Python workers and driver, which are threads, not
an event loop. Never imported by the gateway.
"""

from .cluster import Cluster, ClusterError
from .security import Security

__all__ = ["Cluster", "ClusterError", "Security"]
