"""Kafka's consumer group protocol (KIP-848) as pure transitions: one heartbeat in, its answer out.

The coordinator, not a leader member, assigns. Three epochs carry it:

- the **group epoch** rises whenever what should be assigned changes (a member joins or
  leaves, a subscription or the subscribed topics' partitions change);
- the **assignment epoch** is the group epoch the current *target assignment* was computed
  for (by the group's server-side assignor, :mod:`.assignors`);
- each **member epoch** is the assignment epoch the member has reconciled to.

A member moves to the target one step per heartbeat, incrementally: partitions it must give
up are revoked first (it keeps its epoch until its heartbeat shows them released, or its
rebalance timeout fences it); only then does it advance to the assignment epoch, receiving
the partitions of its target that no other member still holds. Nobody else stops: no
stop-the-world rebalance. The member states are Kafka's: stable, unrevoked partitions,
unreleased partitions.

No I/O and no trio: every event is given ``now`` (seconds on the driver's monotonic clock);
topics are named here (the handler maps topic ids at the edge).
"""

from __future__ import annotations

import base64
import enum
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafscale.protocol.consumer_protocol import decode_subscription, encode_assignment
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.group_records import GroupMember

from ..patterns import compile_regex
from .assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment, assignment_of, pairs_of
from .classic import JoinRequest
from .settings import GroupSettings
from .store import CommittedOffset

__all__ = ["ConsumerGroup", "ConsumerGroupState", "ConsumerMember", "ClassicMetadata", "MemberState", "Heartbeat",
           "HeartbeatAnswer",
           "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH"]

log = logging.getLogger("kafscale.groups")

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now and will rejoin with its instance id


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # waits for the member to release partitions
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for other members to release its partitions


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat with topics named; ``None`` fields did not change."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None  # None: unchanged since the member's last answer


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """A member that speaks the classic protocol in a consumer-protocol group (KIP-848's online
    migration): it joins, syncs and heartbeats as a classic member, and the coordinator
    assigns for it like for the others."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # its JoinGroup's (name, metadata), in its order


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: frozenset[str] = frozenset()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)  # what the member may consume now
    revoking: Assignment = field(default_factory=dict)  # what it must release before it advances
    session_deadline: float = 0.0
    revoke_deadline: float | None = None
    left_static: bool = False  # left with epoch -2: its place is kept for its instance id
    classic: ClassicMetadata | None = None  # set for a member that speaks the classic protocol

    def holds(self) -> set[tuple[str, int]]:
        return pairs_of(self.assigned) | pairs_of(self.revoking)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    settings: GroupSettings = field(default_factory=GroupSettings)
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id → member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id → its target assignment
    subscribed: dict[str, int] = field(default_factory=dict)  # topic → partitions, when the target was computed
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # The topics (and partition counts) last seen, and whether a subscription changed since:
    # a heartbeat that changes neither costs no look at the other members.
    catalog: dict[str, int] = field(default_factory=dict)
    subscriptions_changed: bool = True
    holders: dict[tuple[str, int], str] = field(default_factory=dict)  # partition → the member holding it
    dead: bool = False
    changes: int = 0  # changes to what :meth:`snapshot` keeps, so the driver saves only after one

    kind = "consumer"
    protocol_type = "consumer"
    leader_id = None

    # -- what the group is ---------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.group_epoch

    @property
    def protocol_name(self) -> str:
        return self.assignor()

    def assignor(self) -> str:
        """The group's server-side assignor: the one most members ask for, else the default."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name]) if votes else DEFAULT_ASSIGNOR

    def member_records(self) -> list[GroupMember]:
        return [GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            self.settings.consumer_session_timeout_ms, b"", b"") for m in self.members.values()]

    def take_effects(self) -> list:
        return []  # every answer is immediate: nothing is parked

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    # -- events ----------------------------------------------------------------------------------

    def heartbeat(self, beat: Heartbeat, topics: Mapping[str, int], now: float) -> HeartbeatAnswer:
        """One ConsumerGroupHeartbeat; ``topics`` are the cluster's topics and their partition counts."""
        if not beat.member_id:
            raise KafkaError(ErrorCode.invalid_request, "the member id must be set (KIP-1082: the client makes it)")
        if beat.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(beat, now)
        if beat.member_epoch == 0:
            member = self._join(beat, now)
        else:
            member = self._known(beat)
        changed = self._update(member, beat)
        member.session_deadline = now + self.settings.consumer_session_timeout_ms / 1000
        if changed:
            self.group_epoch += 1
            self.subscriptions_changed = True
            self.changes += 1
        self._refresh_target(topics)
        sent = self._reconcile(member, beat.owned, now)
        full = beat.member_epoch == 0 or (beat.owned is not None and pairs_of(beat.owned) != pairs_of(member.assigned))
        return HeartbeatAnswer(member.member_id, member.epoch, self.settings.consumer_heartbeat_interval_ms,
                               member.assigned if sent or full else None)

    def _join(self, beat: Heartbeat, now: float) -> ConsumerMember:
        if beat.subscribed_topic_names is None and beat.subscribed_topic_regex is None:
            raise KafkaError(ErrorCode.invalid_request, "a joining member must subscribe to topic names or a regex")
        if beat.rebalance_timeout_ms < 0:
            raise KafkaError(ErrorCode.invalid_request, "a joining member must give its rebalance timeout")
        if beat.server_assignor is not None and beat.server_assignor not in ASSIGNORS:
            raise KafkaError(ErrorCode.unsupported_assignor,
                             f"assignor {beat.server_assignor!r} is not one of {sorted(ASSIGNORS)}")
        if beat.subscribed_topic_regex:
            compile_regex(beat.subscribed_topic_regex)  # refused before the member counts
        old = self.members.get(beat.member_id)
        if old is not None:  # the same member joining again (after a fence): it starts over
            self._remove(old)
        if beat.instance_id is not None and beat.instance_id in self.static:
            previous = self.members[self.static[beat.instance_id]]
            if not previous.left_static:
                raise KafkaError(ErrorCode.unreleased_instance_id,
                                 f"instance {beat.instance_id} is still held by member {previous.member_id}")
            # KIP-345 in the new protocol: the static member's new incarnation takes its place,
            # epoch and assignment; nothing is reassigned.
            old_id = previous.member_id
            del self.members[old_id]
            previous.member_id = beat.member_id
            previous.left_static = False
            previous.client_id, previous.client_host = beat.client_id, beat.client_host
            self.members[beat.member_id] = previous
            self.static[beat.instance_id] = beat.member_id
            if old_id in self.target:
                self.target[beat.member_id] = self.target.pop(old_id)
            for pair in previous.holds():
                self.holders[pair] = beat.member_id
            self.changes += 1
            log.info("group %s: static member %s rejoined as %s", self.group_id, beat.instance_id, beat.member_id)
            return previous
        if len(self.members) >= self.settings.consumer_max_size:
            raise KafkaError(ErrorCode.group_max_size_reached,
                             f"group {self.group_id} has {len(self.members)} members, its most")
        member = ConsumerMember(beat.member_id, beat.instance_id, beat.rack_id, beat.client_id, beat.client_host,
                                beat.rebalance_timeout_ms)
        self.members[member.member_id] = member
        if beat.instance_id is not None:
            self.static[beat.instance_id] = member.member_id
        self.group_epoch += 1
        self.subscriptions_changed = True
        self.changes += 1
        log.info("group %s: member %s joined (consumer protocol)", self.group_id, member.member_id)
        return member

    def _known(self, beat: Heartbeat) -> ConsumerMember:
        member = self.members.get(beat.member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {beat.member_id}")
        if beat.member_epoch == member.epoch:
            return member
        if beat.member_epoch == member.previous_epoch and (
                beat.owned is None or pairs_of(beat.owned) <= pairs_of(member.assigned)):
            return member  # its last answer was lost: it is sent again
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"member epoch {beat.member_epoch} is not {member.epoch}")

    def _update(self, member: ConsumerMember, beat: Heartbeat) -> bool:
        """The member's fields the heartbeat changes; whether the assignment must be recomputed."""
        changed = False
        if beat.subscribed_topic_names is not None and frozenset(beat.subscribed_topic_names) != member.subscribed_names:
            member.subscribed_names = frozenset(beat.subscribed_topic_names)
            changed = True
        if beat.subscribed_topic_regex is not None:
            regex = beat.subscribed_topic_regex or None
            if regex is not None:
                compile_regex(regex)
            if regex != member.subscribed_regex:
                member.subscribed_regex = regex
                changed = True
        if beat.server_assignor is not None:
            if beat.server_assignor not in ASSIGNORS:
                raise KafkaError(ErrorCode.unsupported_assignor,
                                 f"assignor {beat.server_assignor!r} is not one of {sorted(ASSIGNORS)}")
            if beat.server_assignor != member.server_assignor:
                member.server_assignor = beat.server_assignor
                changed = True
        if beat.rack_id is not None:
            member.rack_id = beat.rack_id
        if beat.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = beat.rebalance_timeout_ms
        return changed

    def _leave(self, beat: Heartbeat, now: float) -> HeartbeatAnswer:
        member = self.members.get(beat.member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {beat.member_id}")
        if beat.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Its partitions stay its own until its session ends: a restart gets them back.
            member.left_static = True
            self.changes += 1
            member.session_deadline = now + self.settings.consumer_session_timeout_ms / 1000
            log.info("group %s: static member %s left for now", self.group_id, member.instance_id)
        else:
            log.info("group %s: member %s left", self.group_id, member.member_id)
            self._remove(member)
            self.group_epoch += 1
        return HeartbeatAnswer(beat.member_id, beat.member_epoch, self.settings.consumer_heartbeat_interval_ms, None)

    # -- classic members (online migration) -----------------------------------------------------

    def classic_join(self, request: JoinRequest, topics: Mapping[str, int], now: float) -> dict:
        """A classic member's JoinGroup, answered at once: its subscription and the partitions
        it says it owns come from its metadata (Kafka's ConsumerProtocol); it is reconciled
        as a heartbeat would reconcile it, and its member epoch is the generation it is told.
        Its partitions come in its SyncGroup; a heartbeat tells it to join again when its
        target moved (REBALANCE_IN_PROGRESS)."""
        if request.protocol_type != self.protocol_type or not request.protocols:
            raise KafkaError(ErrorCode.inconsistent_group_protocol,
                             f"group {self.group_id} is a consumer group: protocol type 'consumer' is needed")
        settings = self.settings
        if not settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms:
            raise KafkaError(ErrorCode.invalid_session_timeout,
                             f"session timeout {request.session_timeout_ms} ms is outside "
                             f"[{settings.min_session_timeout_ms}, {settings.max_session_timeout_ms}]")
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except ValueError as exc:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, f"not a consumer subscription: {exc}") from exc
        if not request.member_id and request.require_known_member_id and request.group_instance_id is None:
            # KIP-394 as in a classic group: the id first; the group changes when it comes back
            # with it (an unknown id is a new member here).
            return dict(error_code=ErrorCode.member_id_required, generation_id=-1, protocol_type=None,
                        protocol_name=None, leader="", member_id=f"{request.client_id or 'member'}-{uuid.uuid4()}",
                        members=[])
        member = self._classic_joiner(request)
        member.classic = ClassicMetadata(request.session_timeout_ms, tuple(request.protocols))
        member.client_id, member.client_host = request.client_id, request.client_host
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if subscription.rack is not None:
            member.rack_id = subscription.rack
        if frozenset(subscription.topics) != member.subscribed_names:
            member.subscribed_names = frozenset(subscription.topics)
            self.group_epoch += 1
            self.subscriptions_changed = True
        member.session_deadline = now + request.session_timeout_ms / 1000
        self.changes += 1
        self._refresh_target(topics)
        # What it says it owns is the truth of what it holds: an eager member gives everything up
        # before joining again (and a subscription of version 0 names nothing it owns).
        owned = subscription.owned if subscription.owned is not None else {}
        held = pairs_of(owned)
        if not member.holds() <= held:
            self._hold(member, assignment_of(pairs_of(member.assigned) & held),
                       assignment_of(pairs_of(member.revoking) & held))
            if member.state == MemberState.STABLE:  # what it gave up comes back below, where still free
                member.state = MemberState.UNRELEASED_PARTITIONS
        self._reconcile(member, owned, now)
        return dict(error_code=ErrorCode.none, generation_id=member.epoch, protocol_type=self.protocol_type,
                    protocol_name=request.protocols[0][0], leader="", skip_assignment=False,
                    member_id=member.member_id, members=[])

    def _classic_joiner(self, request: JoinRequest) -> ConsumerMember:
        """The member a classic JoinGroup is from: known by its id or instance id, or new (a
        consumer group takes an unknown id as a new member, as Kafka does)."""
        if request.group_instance_id is not None and request.group_instance_id in self.static:
            member = self.members[self.static[request.group_instance_id]]
            if request.member_id and request.member_id != member.member_id:
                raise KafkaError(ErrorCode.fenced_instance_id,
                                 f"instance {request.group_instance_id} belongs to another member")
            member.left_static = False
            return member
        known = self.members.get(request.member_id) if request.member_id else None
        if known is not None:
            return known
        if len(self.members) >= self.settings.consumer_max_size:
            raise KafkaError(ErrorCode.group_max_size_reached,
                             f"group {self.group_id} has {len(self.members)} members, its most")
        member_id = request.member_id or f"{request.client_id or 'member'}-{uuid.uuid4()}"
        member = ConsumerMember(member_id, request.group_instance_id, None, request.client_id, request.client_host,
                                request.rebalance_timeout_ms)
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static[request.group_instance_id] = member_id
        self.group_epoch += 1
        self.subscriptions_changed = True
        log.info("group %s: member %s joined (classic protocol)", self.group_id, member_id)
        return member

    def classic_sync(self, member_id: str, generation: int, instance_id: str | None) -> dict:
        """A classic member's SyncGroup: the partitions it holds now, as its protocol writes them."""
        member = self._classic_member(member_id, generation, instance_id)
        assert member.classic is not None  # (checked)
        return dict(error_code=ErrorCode.none, protocol_type=self.protocol_type,
                    protocol_name=member.classic.protocols[0][0], assignment=encode_assignment(member.assigned))

    def classic_heartbeat(self, member_id: str, generation: int, instance_id: str | None, now: float) -> None:
        """A classic member's Heartbeat; REBALANCE_IN_PROGRESS when it should join again: it
        has partitions to give up, or its target moved, or some of it was freed since."""
        member = self._classic_member(member_id, generation, instance_id)
        assert member.classic is not None
        member.session_deadline = now + member.classic.session_timeout_ms / 1000
        target = pairs_of(self.target.get(member.member_id, {}))
        freed = any(self.holders.get(pair) is None for pair in target - pairs_of(member.assigned))
        if member.state == MemberState.UNREVOKED_PARTITIONS or member.epoch != self.assignment_epoch or (
                member.state == MemberState.UNRELEASED_PARTITIONS and freed):
            raise KafkaError(ErrorCode.rebalance_in_progress, "the group's assignment changed: join again")

    def classic_leave(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None and member_id and self.static.get(instance_id) not in (None, member_id):
            return ErrorCode.fenced_instance_id
        member = self.members.get(self.static[instance_id] if instance_id in self.static else member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", self.group_id, member.member_id)
        self._remove(member)
        self.group_epoch += 1
        return ErrorCode.none

    def _classic_member(self, member_id: str, generation: int, instance_id: str | None) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None or member.classic is None:
            if instance_id is not None and instance_id in self.static:
                raise KafkaError(ErrorCode.fenced_instance_id, f"instance {instance_id} has a newer member")
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if generation != member.epoch:
            raise KafkaError(ErrorCode.illegal_generation, f"generation {generation} is not the member's "
                             f"{member.epoch}")
        return member

    def host(self, member: ConsumerMember, assigned: Assignment) -> None:
        """A classic group's member, taken in at its generation with the partitions it holds
        (:func:`~.migration.upgraded`): its target stays what it holds until the next change."""
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        self._hold(member, assigned, {})
        self.target[member.member_id] = assigned

    def settle(self, topics: Mapping[str, int]) -> None:
        """The current target stands for the members' subscriptions to ``topics`` as they are
        now (a group taken over with its assignment): nothing moves until something changes."""
        self.catalog = dict(topics)
        self.subscriptions_changed = False
        self.subscribed = _subscribed(self._subscriptions(topics), topics)

    @property
    def only_classic_members(self) -> bool:
        """Members, and all of them speak the classic protocol: the group goes back to classic."""
        return bool(self.members) and all(m.classic is not None for m in self.members.values())

    def tick(self, now: float) -> None:
        """Members whose session ended, or who did not release partitions in their rebalance timeout, are removed."""
        gone = [m for m in self.members.values()
                if m.session_deadline <= now or (m.revoke_deadline is not None and m.revoke_deadline <= now)]
        for member in gone:
            log.info("group %s: member %s %s; removed", self.group_id, member.member_id,
                     "session expired" if member.session_deadline <= now else "did not revoke in time")
            self._remove(member)
        if gone:
            self.group_epoch += 1
    
    def next_deadline(self) -> float | None:
        deadlines = [m.session_deadline for m in self.members.values()]
        deadlines += [m.revoke_deadline for m in self.members.values() if m.revoke_deadline is not None]
        return min(deadlines, default=None)

    def dissolve(self, code: ErrorCode) -> None:
        self.members.clear()
        self.static.clear()
        self.dead = True

    def _remove(self, member: ConsumerMember) -> None:
        self.subscriptions_changed = True
        self.changes += 1
        self._hold(member, {}, {})
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]

    # -- assignment ------------------------------------------------------------------------------

    def _subscriptions(self, topics: Mapping[str, int]) -> dict[str, frozenset[str]]:
        subscriptions = {}
        for member in self.members.values():
            subscribed = {t for t in member.subscribed_names if t in topics}
            if member.subscribed_regex is not None:
                pattern = compile_regex(member.subscribed_regex)
                subscribed |= {t for t in topics if not t.startswith("__") and pattern.fullmatch(t)}
            subscriptions[member.member_id] = frozenset(subscribed)
        return subscriptions

    def _refresh_target(self, topics: Mapping[str, int]) -> None:
        if not self.subscriptions_changed and topics == self.catalog:
            if self.group_epoch > self.assignment_epoch:
                self._assign(self._subscriptions(topics))
            return
        self.catalog = dict(topics)
        self.subscriptions_changed = False
        subscriptions = self._subscriptions(topics)
        subscribed = _subscribed(subscriptions, topics)
        if subscribed != self.subscribed:
            self.subscribed = subscribed
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._assign(subscriptions)

    def _assign(self, subscriptions: dict[str, frozenset[str]]) -> None:
        self.changes += 1
        assign = ASSIGNORS[self.assignor()]
        self.target = assign(subscriptions, self.subscribed, self.target)
        self.assignment_epoch = self.group_epoch
        log.info("group %s: target assignment at epoch %d for %d member(s)", self.group_id, self.assignment_epoch,
                 len(self.members))

    def _reconcile(self, member: ConsumerMember, owned: Assignment | None, now: float) -> bool:
        """One step of the member toward its target; whether what it may consume changed."""
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            released = owned is not None and not (pairs_of(owned) & pairs_of(member.revoking))
            if not released:
                return False
            self._hold(member, member.assigned, {})
            member.revoke_deadline = None
            member.state = MemberState.STABLE
        if member.epoch == self.assignment_epoch and member.state == MemberState.STABLE:
            return False
        target = pairs_of(self.target.get(member.member_id, {}))
        current = pairs_of(member.assigned)
        if current - target:
            self._hold(member, assignment_of(current & target), assignment_of(current - target))
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
            return True
        given = {pair for pair in target if self.holders.get(pair, member.member_id) == member.member_id}
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
            self.changes += 1
        member.state = MemberState.STABLE if given == target else MemberState.UNRELEASED_PARTITIONS
        if given == current:
            return False
        self._hold(member, assignment_of(given), {})
        return True

    def _hold(self, member: ConsumerMember, assigned: Assignment, revoking: Assignment) -> None:
        """What ``member`` holds from now, kept in :attr:`holders` (the one index of who holds what)."""
        self.changes += 1
        for pair in member.holds():
            if self.holders.get(pair) == member.member_id:
                del self.holders[pair]
        member.assigned, member.revoking = assigned, revoking
        for pair in member.holds():
            self.holders[pair] = member.member_id

    # -- what outlives the coordinator -----------------------------------------------------------

    def snapshot(self) -> dict:
        """Members, epochs and assignments as JSON values: a new coordinator (after a restart or
        a slot's move) carries on from them, so members keep their epochs and partitions."""
        def named(assignment: Assignment) -> dict[str, list[int]]:
            return {topic: sorted(partitions) for topic, partitions in sorted(assignment.items())}

        return {
            "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
            "subscribed": dict(self.subscribed),
            "target": {member: named(assignment) for member, assignment in self.target.items()},
            "members": [dict(
                id=m.member_id, instance=m.instance_id, rack=m.rack_id, client_id=m.client_id, host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms, names=sorted(m.subscribed_names),
                regex=m.subscribed_regex, assignor=m.server_assignor, epoch=m.epoch, previous_epoch=m.previous_epoch,
                state=m.state.value, assigned=named(m.assigned), revoking=named(m.revoking),
                left_static=m.left_static,
                classic=None if m.classic is None else dict(
                    session_timeout_ms=m.classic.session_timeout_ms,
                    protocols=[[name, base64.b64encode(data).decode()] for name, data in m.classic.protocols]))
                for m in self.members.values()],
        }

    @classmethod
    def restore(cls, group_id: str, settings: GroupSettings, snapshot: dict,
                offsets: dict[tuple[str, int], CommittedOffset], now: float) -> ConsumerGroup:
        """The group a snapshot describes; every member's session starts again at ``now``."""
        def assignment(values: dict) -> Assignment:
            return {str(topic): frozenset(int(p) for p in partitions) for topic, partitions in values.items()}

        group = cls(group_id, settings, group_epoch=int(snapshot["group_epoch"]),
                    assignment_epoch=int(snapshot["assignment_epoch"]), offsets=offsets,
                    subscribed={str(t): int(n) for t, n in snapshot.get("subscribed", {}).items()},
                    target={str(m): assignment(a) for m, a in snapshot.get("target", {}).items()})
        for item in snapshot.get("members", []):
            member = ConsumerMember(
                str(item["id"]), item.get("instance"), item.get("rack"), str(item.get("client_id", "")),
                str(item.get("host", "")), int(item["rebalance_timeout_ms"]),
                subscribed_names=frozenset(item.get("names", [])), subscribed_regex=item.get("regex"),
                server_assignor=item.get("assignor"), epoch=int(item["epoch"]),
                previous_epoch=int(item.get("previous_epoch", -1)), state=MemberState(item.get("state", "stable")),
                left_static=bool(item.get("left_static", False)), classic=_classic_of(item.get("classic")))
            session_timeout_ms = member.classic.session_timeout_ms if member.classic is not None \
                else settings.consumer_session_timeout_ms
            member.session_deadline = now + session_timeout_ms / 1000
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
            group._hold(member, assignment(item.get("assigned", {})), assignment(item.get("revoking", {})))
            if member.revoking:
                member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
        group.changes = 0
        return group

    # -- offsets' rule ---------------------------------------------------------------------------

    def check_commit(self, member_id: str, member_epoch: int, group_instance_id: str | None, now: float) -> None:
        """A member's commit carries its epoch; a commit without member (epoch -1) is allowed
        while the group has no members, as Kafka does."""
        if member_epoch < 0 and not member_id:
            if self.members:
                raise KafkaError(ErrorCode.unknown_member_id, "the group has active members")
            return
        member = self.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if member.classic is not None:  # a classic member commits with the generation it was told
            self._classic_member(member_id, member_epoch, group_instance_id)
            return
        if member_epoch != member.epoch and member_epoch != member.previous_epoch:
            raise KafkaError(ErrorCode.stale_member_epoch, f"member epoch {member_epoch} is not {member.epoch}")


def _subscribed(subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, int]) -> dict[str, int]:
    """The topics some member subscribes to, and their partition counts."""
    return {topic: topics[topic] for subscribed in subscriptions.values() for topic in subscribed}


def _classic_of(stored: dict | None) -> ClassicMetadata | None:
    if stored is None:
        return None
    return ClassicMetadata(int(stored["session_timeout_ms"]),
                           tuple((str(name), base64.b64decode(data)) for name, data in stored["protocols"]))
