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
    # Share groups (KIP-932).
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5000
    share_record_lock_duration_ms: int = 30_000
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2000
    share_max_size: int = 200
    share_auto_offset_reset: str = "latest"
    share_isolation_level: str = "read_uncommitted"
