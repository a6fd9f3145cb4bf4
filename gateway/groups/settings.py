"""What the gateway's configuration sets for every group (Kafka's group.* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupSettings"]


@dataclass(frozen=True, slots=True)
class GroupSettings:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_metadata_bytes: int = 4096
    # The consumer protocol (KIP-848): the coordinator, not the client, sets these.
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_max_size: int = 2**31 - 1
