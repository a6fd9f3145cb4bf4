"""A share group's membership (KIP-932), as pure transitions: heartbeats in, epochs and
assignments out. No I/O, no clock: the driver passes the time.

Share-group members need not own their partitions alone (records, not partitions, are
handed out), so an assignment is given at once, with no revocation round: a member's epoch
follows the group's at its next heartbeat. The assignor spreads each topic's partitions
over the members subscribed to it; with more members than partitions, each partition goes
to several members (Kafka's simple assignor does the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafscale.protocol.errors import ErrorCode, KafkaError

from ..groups.settings import GroupSettings

__all__ = ["ShareGroup", "ShareMember", "ShareBeat", "ShareAnswer", "Assignment"]

Assignment = dict[str, frozenset[int]]  # topic name → partitions

LEAVE_EPOCH = -1
JOIN_EPOCH = 0


@dataclass(frozen=True, slots=True)
class ShareBeat:
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed: tuple[str, ...] | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged since the last answer


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    subscribed: frozenset[str]
    deadline: float
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assigned: Assignment = field(default_factory=dict)


class ShareGroup:
    kind = "share"

    def __init__(self, group_id: str, settings: GroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self._partitions: dict[str, int] = {}  # the subscribed topics' partition counts, as last assigned
        self._target: dict[str, Assignment] = {}

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed)

    def heartbeat(self, beat: ShareBeat, topics: Mapping[str, int], now: float) -> ShareAnswer:
        """One member's heartbeat, given the topics it may be assigned (name → partitions)."""
        if not beat.member_id:
            raise KafkaError(ErrorCode.invalid_request, "a share-group member names itself (member id)")
        if beat.member_epoch == LEAVE_EPOCH:
            self.leave(beat.member_id)
            return ShareAnswer(beat.member_id, LEAVE_EPOCH, 0, None)
        member = self.members.get(beat.member_id)
        if beat.member_epoch == JOIN_EPOCH:
            if beat.subscribed is None:
                raise KafkaError(ErrorCode.invalid_request, "a joining member names the topics it subscribes to")
            if member is None and len(self.members) >= self.settings.share_max_size:
                raise KafkaError(ErrorCode.group_max_size_reached,
                                 f"share group {self.group_id!r} has {len(self.members)} members, its most")
            if member is None:
                member = self.members[beat.member_id] = ShareMember(beat.member_id, 0, frozenset(), now)
            member.epoch = 0
            member.assigned = {}
            self.group_epoch += 1  # a member came (or came back): everyone's share changes
        elif member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"{beat.member_id!r} is not a member of share group "
                                                          f"{self.group_id!r}")
        elif beat.member_epoch != member.epoch:
            raise KafkaError(ErrorCode.fenced_member_epoch, f"member epoch {beat.member_epoch} is not the "
                                                            f"member's epoch {member.epoch}")
        member.deadline = now + self.settings.share_session_timeout_ms / 1000
        member.client_id, member.client_host = beat.client_id, beat.client_host
        if beat.rack_id is not None:
            member.rack_id = beat.rack_id
        if beat.subscribed is not None and frozenset(beat.subscribed) != member.subscribed:
            member.subscribed = frozenset(beat.subscribed)
            self.group_epoch += 1
        counts = {t: topics[t] for t in self.subscribed_topics() if t in topics}
        if counts != self._partitions:  # a subscribed topic was made, grew or went
            self.group_epoch += 1
        if self.assignment_epoch != self.group_epoch:
            self._partitions = counts
            self._target = _assign(self.members, counts)
            self.assignment_epoch = self.group_epoch
        assignment = None
        if member.epoch != self.assignment_epoch:
            member.epoch = self.assignment_epoch
            member.assigned = self._target.get(member.member_id, {})
            assignment = member.assigned
        return ShareAnswer(member.member_id, member.epoch, self.settings.share_heartbeat_interval_ms, assignment)

    def leave(self, member_id: str) -> ShareMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.group_epoch += 1
        return member

    def expire(self, now: float) -> list[ShareMember]:
        """Remove the members whose sessions ended by ``now``."""
        gone = [m for m in self.members.values() if m.deadline <= now]
        for member in gone:
            self.leave(member.member_id)
        return gone

    def next_deadline(self) -> float | None:
        return min((m.deadline for m in self.members.values()), default=None)


def _assign(members: Mapping[str, ShareMember], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    """Each topic's partitions spread over its subscribers, in member-id order: every member
    gets one at least, every partition goes to one member at least."""
    target: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subscribers = sorted(m.member_id for m in members.values() if topic in m.subscribed)
        if not subscribers or count <= 0:
            continue
        for i in range(max(count, len(subscribers))):
            target[subscribers[i % len(subscribers)]].setdefault(topic, set()).add(i % count)
    return {m: {t: frozenset(p) for t, p in topics.items()} for m, topics in target.items()}
