"""What every request handler can reach: config, partition logs, metrics."""

from __future__ import annotations

from dataclasses import dataclass

from .config import GatewayConfig
from .logs import LogManager
from .metrics import Metrics

__all__ = ["GatewayContext"]


@dataclass
class GatewayContext:
    config: GatewayConfig
    logs: LogManager
    metrics: Metrics
    ready: bool = False

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def brokers(self) -> list[dict]:
        host, port = self.config.advertised
        return [dict(node_id=self.config.node_id, host=host, port=port, rack=None)]
