"""What every request handler can reach: config, partition logs, metrics."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

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
    def node_id(self) -> int:
        return self.config.node_id

    def brokers(self) -> list[dict]:
        host, port = self.config.advertised
        return [dict(node_id=self.config.node_id, host=host, port=port, rack=None)]
