"""The classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup)
and committed offsets."""

from .coordinator import GroupCoordinator, GroupState
from .store import EmbeddedGroupStore

__all__ = ["GroupCoordinator", "GroupState", "EmbeddedGroupStore"]
