"""Kafka's classic group protocol as pure transitions: (group, event, now) → answers, effects.

States: Empty → PreparingRebalance → CompletingRebalance → Stable (→ Dead when deleted or
handed to another coordinator); :data:`TRANSITIONS` is the whole table. Members join
(JoinGroup); when every known member has rejoined, or the rebalance timeout passes, the join
completes: a new generation, a protocol all members support, a leader who receives
everyone's metadata. The leader's SyncGroup carries the assignment each member then
receives: the assignor is the client's (range, roundrobin, sticky, cooperative-sticky all
work unchanged).

No I/O and no trio here: every event is a method given ``now`` (seconds on the driver's
monotonic clock). A request answered at once gets its answer returned; one that must wait
(a JoinGroup until the join completes, a follower's SyncGroup until the leader's) gets
:class:`Parked`, and its answer later leaves through :attr:`ClassicGroup.outbox` as a
:class:`JoinAnswer` or :class:`SyncAnswer`. Timers are :meth:`ClassicGroup.next_deadline`
and :meth:`ClassicGroup.tick`. The driver (``coordinator.py``) owns waiting and storage.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.group_records import GroupMember

from .settings import GroupSettings
from .store import CommittedOffset

__all__ = ["GroupState", "TRANSITIONS", "ClassicGroup", "Member", "Parked", "JoinAnswer", "SyncAnswer",
           "RebalanceBegan", "Effect", "JoinRequest"]

log = logging.getLogger("kafscale.groups")


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
TRANSITIONS: frozenset[tuple[GroupState, GroupState]] = frozenset({
    (_S.EMPTY, _S.PREPARING_REBALANCE), (_S.EMPTY, _S.DEAD),
    (_S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE), (_S.PREPARING_REBALANCE, _S.EMPTY),
    (_S.PREPARING_REBALANCE, _S.DEAD),
    (_S.COMPLETING_REBALANCE, _S.STABLE), (_S.COMPLETING_REBALANCE, _S.PREPARING_REBALANCE),
    (_S.COMPLETING_REBALANCE, _S.EMPTY), (_S.COMPLETING_REBALANCE, _S.DEAD),
    (_S.STABLE, _S.PREPARING_REBALANCE), (_S.STABLE, _S.EMPTY), (_S.STABLE, _S.DEAD),
})


@dataclass(frozen=True, slots=True)
class Parked:
    """The request waits: its answer leaves through the outbox, addressed to ``member_id``."""

    member_id: str


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    member_id: str
    result: dict


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    member_id: str
    result: dict


@dataclass(frozen=True, slots=True)
class RebalanceBegan:
    reason: str


Effect = JoinAnswer | SyncAnswer | RebalanceBegan


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    supports_skip_assignment: bool


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = 0.0
    awaiting_join: bool = False  # a JoinGroup of it is parked until the join completes
    awaiting_sync: bool = False  # a SyncGroup of it is parked until the leader's

    def session_deadline(self) -> float:
        return self.last_seen + self.session_timeout_ms / 1000

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")


def _join_error(member_id: str, code: ErrorCode) -> dict:
    return dict(error_code=code, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                member_id=member_id, members=[])


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    settings: GroupSettings = field(default_factory=GroupSettings)
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member id → deadline (MEMBER_ID_REQUIRED)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id → member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    rebalance_deadline: float = 0.0
    # A new group's first join waits this long for more members (group.initial.rebalance.delay.ms).
    initial_delay_until: float | None = None
    outbox: list[Effect] = field(default_factory=list)

    kind = "classic"

    # -- what the group is ---------------------------------------------------------------------

    def member_records(self) -> list[GroupMember]:
        """The members as ``__consumer_offsets`` writes them (their chosen protocol's subscription)."""
        return [GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms, m.metadata_for(self.protocol_name), m.assignment)
                for m in self.members.values()]

    def all_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values())

    def supported_protocols(self) -> set[str] | None:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names

    def take_effects(self) -> list[Effect]:
        effects, self.outbox = self.outbox, []
        return effects

    def _move(self, to: GroupState) -> None:
        if (self.state, to) not in TRANSITIONS:
            raise AssertionError(f"group {self.group_id}: no transition {self.state.value} → {to.value}")
        self.state = to

    # -- events ----------------------------------------------------------------------------------

    def join(self, request: JoinRequest, now: float) -> dict | Parked:
        settings = self.settings
        if not (settings.min_session_timeout_ms <= request.session_timeout_ms <= settings.max_session_timeout_ms):
            raise KafkaError(ErrorCode.invalid_session_timeout,
                             f"session timeout {request.session_timeout_ms} ms is outside "
                             f"[{settings.min_session_timeout_ms}, {settings.max_session_timeout_ms}]")
        if not request.protocols:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "no protocols offered")
        if self.members:
            supported = self.supported_protocols() or set()
            if request.protocol_type != self.protocol_type or not supported & {n for n, _ in request.protocols}:
                raise KafkaError(ErrorCode.inconsistent_group_protocol,
                                 "protocol type or protocols do not match the group's")
        member_id = request.member_id
        instance_id = request.group_instance_id
        static_member = None
        if instance_id is not None and instance_id in self.static:
            static_member = self.members.get(self.static[instance_id])
        if member_id and member_id not in self.members and member_id not in self.pending:
            if static_member is None:
                raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if static_member is not None and member_id and member_id != static_member.member_id:
            raise KafkaError(ErrorCode.fenced_instance_id, f"instance {instance_id} belongs to another member")

        if not member_id:
            new_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
            if static_member is not None:
                return self._rejoin_static(static_member, new_id, request, now)
            if request.require_known_member_id and instance_id is None:
                # KIP-394: hand out the id first, count the member only when it comes back with it.
                self.pending[new_id] = now + request.session_timeout_ms / 1000
                return _join_error(new_id, ErrorCode.member_id_required)
            member_id = new_id

        self.pending.pop(member_id, None)
        member = self.members.get(member_id)
        changed = member is None or member.protocols != request.protocols
        if member is None:
            member = Member(member_id, instance_id, request.client_id, request.client_host,
                            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type,
                            request.protocols)
            self.members[member_id] = member
            if instance_id is not None:
                self.static[instance_id] = member_id
            log.info("group %s: member %s joined", self.group_id, member_id)
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.last_seen = now
        if self.protocol_type is None or len(self.members) == 1:
            self.protocol_type = request.protocol_type

        if self.state == GroupState.STABLE and not changed and member_id != self.leader_id:
            # A follower re-sending the same metadata: nothing to rebalance.
            return self._join_result(member, with_members=False)
        if self.state == GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(member, with_members=member_id == self.leader_id)
        if self.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(f"member {member_id} joined", now)
        elif self.initial_delay_until is not None:
            delay = self.settings.initial_rebalance_delay_ms / 1000
            self.initial_delay_until = min(now + delay, self.rebalance_deadline)
        member.awaiting_join = True
        return Parked(member_id)

    def _rejoin_static(self, old: Member, new_id: str, request: JoinRequest, now: float) -> dict | Parked:
        """KIP-345: a static member restarting takes its old place without a rebalance."""
        assert old.group_instance_id is not None  # found through self.static
        # The old incarnation's requests still waiting are fenced, as Kafka does: their answers
        # are addressed to an id that no longer exists.
        if old.awaiting_join:
            old.awaiting_join = False
            self.outbox.append(JoinAnswer(old.member_id, _join_error(old.member_id, ErrorCode.fenced_instance_id)))
        if old.awaiting_sync:
            old.awaiting_sync = False
            self.outbox.append(SyncAnswer(old.member_id, dict(error_code=ErrorCode.fenced_instance_id,
                                                              assignment=b"")))
        del self.members[old.member_id]
        old.member_id = new_id
        self.members[new_id] = old
        self.static[old.group_instance_id] = new_id
        was_leader = self.leader_id is not None and self.leader_id not in self.members
        if was_leader:
            self.leader_id = new_id
        old.session_timeout_ms, old.rebalance_timeout_ms = request.session_timeout_ms, request.rebalance_timeout_ms
        old.last_seen = now
        log.info("group %s: static member %s rejoined as %s", self.group_id, old.group_instance_id, new_id)
        if self.state == GroupState.STABLE and old.protocols == request.protocols:
            # As Kafka does: no rebalance. A returning leader gets the member list (with
            # skip_assignment from v9, KIP-814); its SyncGroup in the Stable state just
            # returns the stored assignment, so nothing is reassigned.
            result = self._join_result(old, with_members=was_leader)
            result["skip_assignment"] = was_leader and request.supports_skip_assignment
            return result
        old.protocols = request.protocols
        if self.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(f"static member {old.group_instance_id} rejoined", now)
        old.awaiting_join = True
        return Parked(new_id)

    def sync(self, *, member_id: str, generation: int, group_instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], now: float) -> dict | Parked:
        member = self.check_member(member_id, generation, group_instance_id)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "protocol does not match the group's")
        member.last_seen = now
        if self.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        if self.state == GroupState.STABLE:
            return self._sync_result(member)
        member.awaiting_sync = True
        if member_id == self.leader_id:
            for each in self.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            self._move(GroupState.STABLE)
            log.info("group %s: stable at generation %d", self.group_id, self.generation)
            for each in self.members.values():
                if each.awaiting_sync:
                    each.awaiting_sync = False
                    self.outbox.append(SyncAnswer(each.member_id, self._sync_result(each)))
        return Parked(member_id)

    def heartbeat(self, *, member_id: str, generation: int, group_instance_id: str | None, now: float) -> None:
        if self.state == GroupState.EMPTY:
            raise KafkaError(ErrorCode.unknown_member_id, "unknown group or member")
        member = self.check_member(member_id, generation, group_instance_id)
        member.last_seen = now
        if self.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)

    def leave(self, leaving: list[tuple[str, str | None]], now: float) -> list[tuple[str, str | None, ErrorCode]]:
        results: list[tuple[str, str | None, ErrorCode]] = []
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = self.static.get(instance_id)
                if known is not None and member_id and known != member_id:
                    results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                member = self.members.get(known) if known else None
            else:
                member = self.members.get(member_id)
            if member is None:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            log.info("group %s: member %s left", self.group_id, member.member_id)
            self._remove(member)
            removed = True
            results.append((member_id, instance_id, ErrorCode.none))  # Kafka echoes the request's id
        if removed:
            self._after_removal("member left", now)
        return results

    def dissolve(self, code: ErrorCode) -> None:
        """The group ends here (deleted, or its coordinator moved): waiting members get ``code``."""
        for member in list(self.members.values()):
            self._remove(member, code)
        self._move(GroupState.DEAD)

    def tick(self, now: float) -> None:
        """Time passed: forgotten member-id handshakes, expired sessions, the join's timers."""
        self.pending = {m: deadline for m, deadline in self.pending.items() if deadline > now}
        expired = [m for m in self.members.values() if not m.awaiting_join and m.session_deadline() <= now]
        for member in expired:
            log.info("group %s: member %s session expired", self.group_id, member.member_id)
            self._remove(member)
        if expired:
            self._after_removal("session expired", now)
        self._maybe_complete_join(now)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has something to do (``None``: not before an event)."""
        deadlines = list(self.pending.values())
        deadlines += [m.session_deadline() for m in self.members.values() if not m.awaiting_join]
        if self.state == GroupState.PREPARING_REBALANCE:
            if self.initial_delay_until is not None:
                deadlines.append(self.initial_delay_until)
            else:  # at once when everyone has joined: at the next tick, so members arriving together join together
                deadlines.append(0.0 if self.all_joined() else self.rebalance_deadline)
        return min(deadlines, default=None)

    # -- offsets' rule ---------------------------------------------------------------------------

    def check_commit(self, member_id: str, generation: int, group_instance_id: str | None, now: float) -> None:
        """Kafka's rules: a commit with generation -1 and no member is a standalone commit,
        allowed while the group has no members; otherwise the member and generation must match."""
        if generation < 0 and not member_id:
            if self.members:
                raise KafkaError(ErrorCode.unknown_member_id, "the group has active members")
            return
        if self.state == GroupState.COMPLETING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        self.check_member(member_id, generation, group_instance_id).last_seen = now

    def check_member(self, member_id: str, generation: int, group_instance_id: str | None = None) -> Member:
        member = self.members.get(member_id)
        if member is None:
            if group_instance_id is not None and group_instance_id in self.static:
                raise KafkaError(ErrorCode.fenced_instance_id, f"instance {group_instance_id} has a newer member")
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if generation != self.generation:
            raise KafkaError(ErrorCode.illegal_generation,
                             f"generation {generation} is not the group's {self.generation}")
        return member

    # -- transitions -----------------------------------------------------------------------------

    def _join_result(self, member: Member, *, with_members: bool) -> dict:
        members = []
        if with_members:
            members = [dict(member_id=m.member_id, group_instance_id=m.group_instance_id,
                            metadata=m.metadata_for(self.protocol_name))
                       for m in self.members.values()]
        return dict(error_code=ErrorCode.none, generation_id=self.generation, protocol_type=self.protocol_type,
                    protocol_name=self.protocol_name, leader=self.leader_id or "", skip_assignment=False,
                    member_id=member.member_id, members=members)

    def _sync_result(self, member: Member) -> dict:
        return dict(error_code=ErrorCode.none, protocol_type=self.protocol_type,
                    protocol_name=self.protocol_name, assignment=member.assignment)

    def begin_rebalance(self, reason: str, now: float) -> None:
        """Every member must join again (a group that came back from the consumer protocol)."""
        self._prepare_rebalance(reason, now)

    def _prepare_rebalance(self, reason: str, now: float) -> None:
        log.info("group %s: preparing rebalance (%s)", self.group_id, reason)
        self.outbox.append(RebalanceBegan(reason))
        initial = self.state == GroupState.EMPTY
        self._move(GroupState.PREPARING_REBALANCE)
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        self.rebalance_deadline = now + timeout
        self.initial_delay_until = None
        if initial and self.settings.initial_rebalance_delay_ms:
            # As Kafka's group.initial.rebalance.delay.ms: give the first members of a new
            # group a moment to arrive together instead of one rebalance each.
            self.initial_delay_until = min(now + self.settings.initial_rebalance_delay_ms / 1000,
                                           self.rebalance_deadline)
        self._fail_pending_syncs(ErrorCode.rebalance_in_progress)

    def _maybe_complete_join(self, now: float) -> None:
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        if self.initial_delay_until is not None:
            if now < self.initial_delay_until:
                return
            self.initial_delay_until = None
        if self.all_joined() or now >= self.rebalance_deadline:
            self._complete_join(now)

    def _complete_join(self, now: float) -> None:
        for member in list(self.members.values()):
            if not member.awaiting_join:
                log.info("group %s: member %s did not rejoin in time; removed", self.group_id, member.member_id)
                self._remove(member)
        self.generation += 1
        if not self.members:
            self._move(GroupState.EMPTY)
            self.protocol_name = None
            self.leader_id = None
            return
        votes: dict[str, int] = {}
        supported = self.supported_protocols() or set()
        for member in self.members.values():
            for rank, (name, _) in enumerate(member.protocols):
                if name in supported:
                    votes[name] = votes.get(name, 0) + len(member.protocols) - rank
        self.protocol_name = max(sorted(votes), key=lambda name: votes[name])
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._move(GroupState.COMPLETING_REBALANCE)
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s", self.group_id,
                 self.generation, len(self.members), self.protocol_name, self.leader_id)
        for member in self.members.values():
            member.awaiting_join = False
            member.last_seen = now
            self.outbox.append(JoinAnswer(member.member_id, self._join_result(
                member, with_members=member.member_id == self.leader_id)))

    def _remove(self, member: Member, code: ErrorCode = ErrorCode.unknown_member_id) -> None:
        self.members.pop(member.member_id, None)
        if member.group_instance_id is not None and self.static.get(member.group_instance_id) == member.member_id:
            del self.static[member.group_instance_id]
        if member.awaiting_join:
            member.awaiting_join = False
            self.outbox.append(JoinAnswer(member.member_id, _join_error(member.member_id, code)))
        if member.awaiting_sync:
            member.awaiting_sync = False
            self.outbox.append(SyncAnswer(member.member_id, dict(error_code=code, assignment=b"")))

    def _fail_pending_syncs(self, code: ErrorCode) -> None:
        for member in self.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                self.outbox.append(SyncAnswer(member.member_id, dict(
                    error_code=code, assignment=b"", protocol_type=self.protocol_type,
                    protocol_name=self.protocol_name)))

    def _after_removal(self, reason: str, now: float) -> None:
        if self.members and self.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(reason, now)  # (while preparing, the next tick sees who is left)
        elif not self.members:
            self.generation += 1
            if self.state != GroupState.EMPTY:
                self._move(GroupState.EMPTY)
            self.leader_id = None
            self.protocol_name = None
