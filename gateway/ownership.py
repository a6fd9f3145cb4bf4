"""Who serves what: the live gateways, the owner (leader) of each partition and group slot.

A gateway alone owns everything (:class:`SoleGateway`). In a cluster
(:class:`~.cluster.membership.ClusterMember`) ownership comes from etcd; handlers and
the log manager only ask the questions below. A leaf: it imports nothing of the gateway.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Broker", "Endpoint", "Mode", "Ownership", "SoleGateway", "GROUP_UNIT", "group_unit"]


class Mode(enum.Enum):
    """Whether other gateways share the store. EMBEDDED: one gateway; every other writer in
    the store is an earlier run of it. CLUSTER: gateways coordinated through etcd; other
    gateways' writers are live. Decided once (wiring) and passed on as this value."""

    EMBEDDED = "embedded"
    CLUSTER = "cluster"

# Units are (topic, partition); group-coordinator slots are units of this pseudo topic
# ('~' is not legal in topic names, so it cannot collide).
GROUP_UNIT = "~groups"


def group_unit(slot: int) -> tuple[str, int]:
    return (GROUP_UNIT, slot)


Endpoint = tuple[str, str, int]  # (listener name, advertised host, port)


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str  # the first listener's advertised address
    port: int
    endpoints: tuple[Endpoint, ...] = ()  # every listener's
    draining: bool = False  # handing everything over before it stops: nothing is placed on it

    def address(self, listener: str | None) -> tuple[str, int]:
        """Where a client that came in on ``listener`` reaches this broker (Kafka answers
        Metadata and FindCoordinator with the endpoint of the client's own listener)."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


class Ownership(Protocol):
    node_id: int
    mode: Mode

    def lease_valid(self) -> bool:
        """Whether this gateway surely still holds what it owns (a cluster member's etcd lease)."""
    def brokers(self) -> list[Broker]: ...
    def controller_id(self) -> int: ...
    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(owner node id, leader epoch), or None while the partition has no owner."""
    def owns(self, topic: str, partition: int) -> bool: ...
    def coordinator(self, group_id: str) -> Broker | None: ...


class SoleGateway:
    """One gateway: it leads every partition (epoch 0) and coordinates every group."""

    mode = Mode.EMBEDDED

    def __init__(self, node_id: int, host: str, port: int, endpoints: tuple[Endpoint, ...] = ()) -> None:
        self.node_id = node_id
        self.me = Broker(node_id, host, port, endpoints)

    def lease_valid(self) -> bool:
        return True  # nobody else hands its partitions out

    def brokers(self) -> list[Broker]:
        return [self.me]

    def controller_id(self) -> int:
        return self.node_id

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        return (self.node_id, 0)

    def owns(self, topic: str, partition: int) -> bool:
        return True

    def coordinator(self, group_id: str) -> Broker | None:
        return self.me
