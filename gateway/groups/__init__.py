"""Consumer groups: the coordinator (classic and consumer protocols) and committed offsets."""

from .classic import GroupState
from .coordinator import GroupCoordinator
from .store import EmbeddedGroupStore

__all__ = ["GroupCoordinator", "GroupState", "EmbeddedGroupStore"]
