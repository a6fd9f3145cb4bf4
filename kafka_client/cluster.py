"""The brokers of a cluster as a client sees them: bootstrap, partition leaders from
Metadata, coordinators from FindCoordinator, and retries of what Kafka calls retriable."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode

from .connection import BrokerConnection, ConnectionLost
from .security import Security

__all__ = ["Cluster", "ClusterError", "GROUP", "TRANSACTION"]

T = TypeVar("T")

GROUP = 0  # FindCoordinator's key types
TRANSACTION = 1
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class ClusterError(Exception):
    """A Kafka error code answered to a request (``retriable`` as Kafka classifies it)."""

    def __init__(self, code: ErrorCode, what: str) -> None:
        super().__init__(f"{what}: {code.name}")
        self.code = code

    @property
    def retriable(self) -> bool:
        return self.code.retriable or self.code in (ErrorCode.concurrent_transactions,
                                                    ErrorCode.coordinator_load_in_progress)


def check(code: ErrorCode, what: str) -> None:
    if code != ErrorCode.none:
        raise ClusterError(code, what)


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    found = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item.strip()!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise ValueError("no bootstrap server given")
    return found


class Cluster:
    def __init__(self, bootstrap_servers: str, security: Security | None = None, *, timeout_s: float = 30.0,
                 client_id: str = "kafscale-client") -> None:
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security or Security()
        self.timeout_s = timeout_s
        self._client_id = client_id
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._partition_counts: dict[str, int] = {}
        self._coordinators: dict[tuple[int, str], int] = {}

    # -- connections ------------------------------------------------------------------------

    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        found = self._connections.get(address)
        if found is None:
            found = BrokerConnection(*address, self.security, timeout_s=self.timeout_s, client_id=self._client_id)
            self._connections[address] = found
        return found

    def node(self, node_id: int) -> BrokerConnection:
        if node_id not in self._brokers:
            self.refresh()
        if node_id not in self._brokers:
            raise ClusterError(ErrorCode.leader_not_available, f"broker {node_id} is not in the cluster's metadata")
        return self._connect(self._brokers[node_id])

    def call(self, connection: BrokerConnection, api_key: ApiKey, version: int, values: dict):
        try:
            return connection.call(api_key, version, values)
        except ConnectionLost:
            self._forget(connection)
            raise

    def _forget(self, connection: BrokerConnection) -> None:
        for address, known in list(self._connections.items()):
            if known is connection:
                del self._connections[address]
        connection.close()

    def any_broker(self) -> BrokerConnection:
        errors = []
        for address in [*self._brokers.values(), *self._bootstrap]:
            try:
                return self._connect(address)
            except OSError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
        raise ConnectionLost("no broker reachable: " + "; ".join(errors))

    # -- metadata ---------------------------------------------------------------------------

    def refresh(self, topics: list[str] | None = None) -> dict[str, ErrorCode]:
        """Brokers and leaders; asking for ``topics`` creates them where the cluster creates
        topics on first use (as Kafka's producers ask). Returns each topic's error."""
        connection = self.any_broker()
        answer = self.call(connection, ApiKey.METADATA, 12, {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": topics is not None, "include_topic_authorized_operations": False})
        self._brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        errors = {}
        for topic in answer.topics:
            errors[topic.name] = topic.error_code
            if topic.error_code != ErrorCode.none:
                self._partition_counts.pop(topic.name, None)
                continue
            self._partition_counts[topic.name] = len(topic.partitions)
            for partition in topic.partitions:
                self._leaders[(topic.name, partition.partition_index)] = partition.leader_id
        return errors

    def partition_count(self, topic: str) -> int:
        if topic not in self._partition_counts:
            def known() -> None:
                check(self.refresh([topic]).get(topic, ErrorCode.unknown_topic_or_partition), f"topic {topic!r}")

            self.retry(known, deadline_s=min(self.timeout_s, 10.0))  # a topic created just now has no leader yet
        return self._partition_counts[topic]

    def leader(self, topic: str, partition: int) -> BrokerConnection:
        node = self._leaders.get((topic, partition))
        if node is None or node < 0:
            self.refresh([topic])
            node = self._leaders.get((topic, partition))
        if node is None or node < 0:
            raise ClusterError(ErrorCode.leader_not_available, f"{topic}-{partition} has no leader")
        return self.node(node)

    def forget_leader(self, topic: str, partition: int) -> None:
        self._leaders.pop((topic, partition), None)

    def coordinator(self, key_type: int, key: str) -> BrokerConnection:
        node = self._coordinators.get((key_type, key))
        if node is None:
            answer = self.call(self.any_broker(), ApiKey.FIND_COORDINATOR, 4,
                               {"key_type": key_type, "coordinator_keys": [key]})
            found = answer.coordinators[0]
            check(found.error_code, f"FindCoordinator {key!r}")
            self._brokers[found.node_id] = (found.host, found.port)
            node = self._coordinators[(key_type, key)] = found.node_id
        return self.node(node)

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    def retry(self, operation: Callable[[], T], *, deadline_s: float | None = None,
              on_retry: Callable[[], None] | None = None) -> T:
        """``operation`` until it succeeds, fails for good, or ``deadline_s`` (default: the
        request timeout) passes; ``on_retry`` forgets what the failure made stale."""
        give_up = time.monotonic() + (self.timeout_s if deadline_s is None else deadline_s)
        attempt = 0
        while True:
            try:
                return operation()
            except (ClusterError, ConnectionLost) as exc:
                if isinstance(exc, ClusterError) and not exc.retriable:
                    raise
                pause = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
                if time.monotonic() + pause > give_up:
                    raise
                attempt += 1
                if on_retry is not None:
                    on_retry()
                time.sleep(pause)

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
