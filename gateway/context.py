"""What request handlers reach: the gateway's parts (:class:`GatewayContext`, one per
gateway) and, per request, who asks and with what memory (:class:`RequestContext`)."""

from __future__ import annotations

from dataclasses import dataclass

from kafscale.protocol.features import Features

from .budget import RequestMemory
from .clock import Clock
from .config import GatewayConfig
from .fetch_sessions import FetchSessions
from .groups import GroupCoordinator
from .lfs import LfsService
from .log import LogManager
from .metrics import Metrics
from .ownership import Broker, Ownership
from .security.access import Access, ClientAccess
from .security.session import Session
from .shares.coordinator import ShareCoordinator
from .transactions.coordinator import TransactionCoordinator

__all__ = ["GatewayContext", "RequestContext"]


@dataclass
class GatewayContext:
    config: GatewayConfig
    clock: Clock
    logs: LogManager
    metrics: Metrics
    groups: GroupCoordinator
    shares: ShareCoordinator
    access: Access
    transactions: TransactionCoordinator
    lfs: LfsService
    fetch_sessions: FetchSessions
    features: Features  # the feature levels ApiVersions tells clients
    ready: bool = False

    @property
    def ownership(self) -> Ownership:
        return self.logs.ownership

    @property
    def node_id(self) -> int:
        return self.logs.ownership.node_id


class RequestContext:
    """One client request: the gateway's parts, the client's session (every authorization
    check decides for it), the memory the request holds and its deadline (trio time: an
    ordered handler, which the connection runs without a cancel scope of its own, bounds
    what it awaits by it)."""

    __slots__ = ("gateway", "session", "memory", "access", "deadline")

    def __init__(self, gateway: GatewayContext, session: Session, memory: RequestMemory, deadline: float) -> None:
        self.gateway = gateway
        self.session = session
        self.memory = memory
        self.access = ClientAccess(gateway.access, session)
        self.deadline = deadline

    @property
    def config(self) -> GatewayConfig:
        return self.gateway.config

    @property
    def logs(self) -> LogManager:
        return self.gateway.logs

    @property
    def clock(self) -> Clock:
        return self.gateway.clock

    @property
    def metrics(self) -> Metrics:
        return self.gateway.metrics

    @property
    def groups(self) -> GroupCoordinator:
        return self.gateway.groups

    @property
    def shares(self) -> ShareCoordinator:
        return self.gateway.shares

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.gateway.transactions

    @property
    def ownership(self) -> Ownership:
        return self.gateway.logs.ownership

    @property
    def node_id(self) -> int:
        return self.gateway.node_id

    @property
    def peer_host(self) -> str:
        return self.session.host

    def address(self, broker: Broker) -> tuple[str, int]:
        """The broker's address on the listener this client came in on (Kafka answers
        Metadata and FindCoordinator with the endpoint of the client's own listener)."""
        return broker.address(self.session.listener.name)

    def brokers(self) -> list[dict]:
        return [dict(node_id=b.node_id, host=host, port=port, rack=None)
                for b in self.ownership.brokers() for host, port in [self.address(b)]]
