"""What every request handler can reach: config, partition logs, metrics, access control."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from .config import GatewayConfig
from .groups import GroupCoordinator
from .logs import LogManager
from .metrics import Metrics
from .ownership import Broker, Ownership
from .security.access import Access, current_session

__all__ = ["GatewayContext", "current_peer"]

# The client address of the request being handled (set by the connection).
current_peer: contextvars.ContextVar[str] = contextvars.ContextVar("current_peer", default="unknown")


@dataclass
class GatewayContext:
    config: GatewayConfig
    logs: LogManager
    metrics: Metrics
    groups: GroupCoordinator
    access: Access
    ready: bool = False

    @property
    def ownership(self) -> Ownership:
        return self.logs.ownership

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def address(self, broker: Broker) -> tuple[str, int]:
        """The broker's address on the listener the current client came in on."""
        session = current_session.get()
        return broker.address(session.listener.name if session else None)

    def brokers(self) -> list[dict]:
        return [dict(node_id=b.node_id, host=host, port=port, rack=None)
                for b in self.ownership.brokers() for host, port in [self.address(b)]]
