"""What every request handler can reach: config, partition logs, metrics."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from .cluster.ownership import Ownership
from .config import GatewayConfig
from .groups import GroupCoordinator
from .logs import LogManager
from .metrics import Metrics

__all__ = ["GatewayContext", "current_peer"]

# The client address of the request being handled (set by the connection).
current_peer: contextvars.ContextVar[str] = contextvars.ContextVar("current_peer", default="unknown")


@dataclass
class GatewayContext:
    config: GatewayConfig
    logs: LogManager
    metrics: Metrics
    groups: GroupCoordinator
    ready: bool = False

    @property
    def ownership(self) -> Ownership:
        return self.logs.ownership

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def brokers(self) -> list[dict]:
        return [dict(node_id=b.node_id, host=b.host, port=b.port, rack=None) for b in self.ownership.brokers()]
