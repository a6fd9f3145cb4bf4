"""The group coordinator of Kafka's classic protocol, as a state machine under trio.

States: Empty → PreparingRebalance → CompletingRebalance → Stable (→ Dead when
deleted). Members join (JoinGroup); when every known member has rejoined, or the
rebalance timeout passes, the join completes: a new generation, a protocol all
members support, a leader who receives everyone's metadata. The leader's
SyncGroup carries the assignment each member then receives: the assignor is the
client's (range, roundrobin, sticky, cooperative-sticky all work unchanged).
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.group_records import GroupMember

from ..ownership import Mode
from .offsets_topic import OffsetsLog
from .store import CommittedOffset, GroupStore, LoadedGroups, StoredGroup, slot_of

__all__ = ["GroupCoordinator", "GroupState", "GroupSettings", "Member", "Group"]

log = logging.getLogger("kafscale.groups")


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    max_metadata_bytes: int = 4096


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
    join_done: trio.Event | None = None
    join_result: dict | None = None
    sync_done: trio.Event | None = None
    sync_result: dict | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member id → deadline (MEMBER_ID_REQUIRED)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id → member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    rebalance_started: float = 0.0
    rebalance_deadline: float = 0.0
    joined_changed: trio.Event = field(default_factory=trio.Event)
    # Saves of the stored state (offsets, generation), one at a time: see GroupCoordinator._save.
    save_lock: trio.Lock = field(default_factory=trio.Lock)
    changes: int = 0  # changes to the stored state so far
    saved: int = 0  # how many of them the store holds

    def member_records(self) -> list[GroupMember]:
        """The members as ``__consumer_offsets`` writes them (their chosen protocol's subscription)."""
        return [GroupMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms, m.metadata_for(self.protocol_name), m.assignment)
                for m in self.members.values()]

    def all_joined(self) -> bool:
        return all(m.join_done is not None and not m.join_done.is_set() for m in self.members.values())

    def supported_protocols(self) -> set[str] | None:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names


def _now() -> float:
    return trio.current_time()


class GroupCoordinator:
    def __init__(self, store: GroupStore, settings: GroupSettings, on_rebalance=None, *,
                 offsets_log: OffsetsLog, mode: Mode, slots: int) -> None:
        self._store = store
        self._offsets_log = offsets_log  # __consumer_offsets for readers (a lone gateway's)
        self.settings = settings
        self._on_rebalance = on_rebalance or (lambda group_id: None)
        self.groups: dict[str, Group] = {}
        self._nursery: trio.Nursery | None = None
        # Which groups this gateway coordinates: all of them alone; in a cluster the groups of
        # the coordinator slots (``slots`` of them in the cluster) it adopted.
        self.slots = slots
        self._every_slot = mode is Mode.EMBEDDED
        self._owned_slots: set[int] = set()
        self._loading_slots: set[int] = set()
        # Groups whose stored state does not parse: refused (COORDINATOR_NOT_AVAILABLE) rather
        # than started empty, which would reset their consumers and overwrite what is stored.
        self.damaged: dict[str, str] = {}

    async def load(self) -> None:
        """Alone: load every group once at start."""
        self._install_all(await self._store.load_all())
        await self._offsets_log.start(self.groups)

    def _install_all(self, loaded: LoadedGroups) -> None:
        for stored in loaded.groups:
            self._install(stored)
        for group_id, why in loaded.damaged.items():
            log.error("group %r is not served: its stored state is unreadable (%s); repair or remove it, then "
                      "restart or move its coordinator", group_id, why)
        self.damaged.update(loaded.damaged)

    def _install(self, stored: StoredGroup) -> None:
        self.groups[stored.group_id] = Group(
            stored.group_id, generation=stored.generation, protocol_type=stored.protocol_type,
            offsets=dict(stored.offsets),
        )

    async def adopt_slot(self, slot: int) -> None:
        """This gateway became the coordinator of ``slot``: load its groups' committed state."""
        self._loading_slots.add(slot)
        try:
            self._install_all(await self._store.load_slot(slot, self.slots))
            self._owned_slots.add(slot)
        finally:
            self._loading_slots.discard(slot)

    def drop_slot(self, slot: int) -> None:
        """Another gateway coordinates ``slot`` now: forget its groups; members waiting on a
        join or sync are told NOT_COORDINATOR and find the new coordinator."""
        self._owned_slots.discard(slot)
        for group_id in [g for g in self.damaged if slot_of(g, self.slots) == slot]:
            del self.damaged[group_id]  # its next coordinator reads it again
        for group in [g for g in self.groups.values() if slot_of(g.group_id, self.slots) == slot]:
            for member in list(group.members.values()):
                self._remove(group, member, ErrorCode.not_coordinator)
            group.state = GroupState.DEAD
            group.joined_changed.set()
            del self.groups[group.group_id]

    def owned_slots(self) -> set[int]:
        return set(range(self.slots)) if self._every_slot else set(self._owned_slots)

    def check_coordinator(self, group_id: str) -> None:
        if group_id in self.damaged:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"the stored state of group {group_id!r} is unreadable: {self.damaged[group_id]}")
        if self._every_slot:
            return
        slot = slot_of(group_id, self.slots)
        if slot in self._loading_slots:
            raise KafkaError(ErrorCode.coordinator_load_in_progress, f"loading groups of slot {slot}")
        if slot not in self._owned_slots:
            raise KafkaError(ErrorCode.not_coordinator, f"this gateway does not coordinate {group_id!r}")

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Owns the rebalance timers and expires members whose session ran out."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._offsets_log.run)
            task_status.started()
            while True:
                await trio.sleep(0.2)
                try:
                    self._expire_sessions()
                except Exception:
                    log.exception("expiring sessions failed")

    # -- membership -------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group | None:
        """The group, if it exists (and this gateway coordinates it)."""
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        return None if group is None or group.state == GroupState.DEAD else group

    def _group_or_new(self, group_id: str) -> Group:
        """The group, created empty if it does not exist."""
        group = self._group(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    async def join(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], require_known_member_id: bool, supports_skip_assignment: bool,
    ) -> dict:
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "group id must not be empty")
        if not (self.settings.min_session_timeout_ms <= session_timeout_ms <= self.settings.max_session_timeout_ms):
            raise KafkaError(ErrorCode.invalid_session_timeout,
                             f"session timeout {session_timeout_ms} ms is outside "
                             f"[{self.settings.min_session_timeout_ms}, {self.settings.max_session_timeout_ms}]")
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if not protocols:
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "no protocols offered")
        group = self._group_or_new(group_id)
        if group.members:
            supported = group.supported_protocols() or set()
            if protocol_type != group.protocol_type or not supported & {name for name, _ in protocols}:
                raise KafkaError(ErrorCode.inconsistent_group_protocol,
                                 "protocol type or protocols do not match the group's")

        now = _now()
        static_member = None
        if group_instance_id is not None and group_instance_id in group.static:
            static_member = group.members.get(group.static[group_instance_id])

        if member_id and member_id not in group.members and member_id not in group.pending:
            if static_member is None:
                raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if static_member is not None and member_id and member_id != static_member.member_id:
            raise KafkaError(ErrorCode.fenced_instance_id,
                             f"instance {group_instance_id} belongs to another member")

        if not member_id:
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if static_member is not None:
                return await self._rejoin_static(group, static_member, new_id, protocols, session_timeout_ms,
                                                 rebalance_timeout_ms, supports_skip_assignment)
            if require_known_member_id and group_instance_id is None:
                # KIP-394: hand out the id first, count the member only when it comes back with it.
                group.pending[new_id] = now + session_timeout_ms / 1000
                return dict(error_code=ErrorCode.member_id_required, generation_id=-1, protocol_type=None,
                            protocol_name=None, leader="", member_id=new_id, members=[])
            member_id = new_id

        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        changed = member is None or member.protocols != protocols
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols)
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static[group_instance_id] = member_id
            log.info("group %s: member %s joined", group.group_id, member_id)
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.last_seen = now
        if group.protocol_type is None or len(group.members) == 1:
            group.protocol_type = protocol_type

        if group.state == GroupState.STABLE and not changed and member_id != group.leader_id:
            # A follower re-sending the same metadata: nothing to rebalance.
            return self._join_result(group, member, with_members=False)
        if group.state == GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_result(group, member, with_members=member_id == group.leader_id)
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member_id} joined")
        member.join_done = trio.Event()
        member.join_result = None
        group.joined_changed.set()
        group.joined_changed = trio.Event()
        await member.join_done.wait()
        assert member.join_result is not None
        return member.join_result

    async def _rejoin_static(self, group: Group, old: Member, new_id: str, protocols, session_timeout_ms,
                             rebalance_timeout_ms, supports_skip_assignment) -> dict:
        """KIP-345: a static member restarting takes its old place without a rebalance."""
        assert old.group_instance_id is not None  # found through group.static
        del group.members[old.member_id]
        old.member_id = new_id
        group.members[new_id] = old
        group.static[old.group_instance_id] = new_id
        was_leader = group.leader_id is not None and group.leader_id not in group.members
        if was_leader:
            group.leader_id = new_id
        old.session_timeout_ms, old.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        old.last_seen = _now()
        log.info("group %s: static member %s rejoined as %s", group.group_id, old.group_instance_id, new_id)
        if group.state == GroupState.STABLE and old.protocols == protocols:
            # As Kafka does: no rebalance. A returning leader gets the member list (with
            # skip_assignment from v9, KIP-814); its SyncGroup in the Stable state just
            # returns the stored assignment, so nothing is reassigned.
            result = self._join_result(group, old, with_members=was_leader)
            result["skip_assignment"] = was_leader and supports_skip_assignment
            return result
        old.protocols = protocols
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"static member {old.group_instance_id} rejoined")
        old.join_done = trio.Event()
        await old.join_done.wait()
        assert old.join_result is not None  # set by whoever completed the join
        return old.join_result

    def _join_result(self, group: Group, member: Member, *, with_members: bool) -> dict:
        members = []
        if with_members:
            members = [dict(member_id=m.member_id, group_instance_id=m.group_instance_id,
                            metadata=m.metadata_for(group.protocol_name))
                       for m in group.members.values()]
        return dict(error_code=ErrorCode.none, generation_id=group.generation, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, leader=group.leader_id or "", skip_assignment=False,
                    member_id=member.member_id, members=members)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        log.info("group %s: preparing rebalance (%s)", group.group_id, reason)
        self._on_rebalance(group.group_id)
        initial = group.state == GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        group.rebalance_started = _now()
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        group.rebalance_deadline = group.rebalance_started + timeout
        self._fail_pending_syncs(group, ErrorCode.rebalance_in_progress)
        assert self._nursery is not None, "GroupCoordinator.run() must be started first"
        self._nursery.start_soon(self._complete_join_when_ready, group, initial)

    async def _complete_join_when_ready(self, group: Group, initial: bool) -> None:
        try:
            await self._wait_and_complete_join(group, initial)
        except Exception:  # a bug here must cost one rebalance, not the gateway
            log.exception("group %s: completing the join failed", group.group_id)

    async def _wait_and_complete_join(self, group: Group, initial: bool) -> None:
        generation = group.generation
        if initial and self.settings.initial_rebalance_delay_ms:
            # As Kafka's group.initial.rebalance.delay.ms: give the first members of a new
            # group a moment to arrive together instead of one rebalance each.
            delay = self.settings.initial_rebalance_delay_ms / 1000
            deadline = min(_now() + delay, group.rebalance_deadline)
            while True:
                with trio.move_on_at(deadline) as scope:
                    await group.joined_changed.wait()
                if scope.cancelled_caught:
                    break
                deadline = min(_now() + delay, group.rebalance_deadline)
        while group.state == GroupState.PREPARING_REBALANCE and not group.all_joined():
            with trio.move_on_at(group.rebalance_deadline) as scope:
                await group.joined_changed.wait()
            if scope.cancelled_caught:
                break
        if group.state == GroupState.PREPARING_REBALANCE and group.generation == generation:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in list(group.members.values()):
            if member.join_done is None or member.join_done.is_set():
                log.info("group %s: member %s did not rejoin in time; removed", group.group_id, member.member_id)
                self._remove(group, member)
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            return
        votes: dict[str, int] = {}
        supported = group.supported_protocols() or set()
        for member in group.members.values():
            for rank, (name, _) in enumerate(member.protocols):
                if name in supported:
                    votes[name] = votes.get(name, 0) + len(member.protocols) - rank
        group.protocol_name = max(sorted(votes), key=lambda name: votes[name])
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            member.join_result = self._join_result(group, member, with_members=member.member_id == group.leader_id)
            member.last_seen = _now()
            assert member.join_done is not None
            member.join_done.set()

    def _remove(self, group: Group, member: Member, code: ErrorCode = ErrorCode.unknown_member_id) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None and group.static.get(member.group_instance_id) == member.member_id:
            del group.static[member.group_instance_id]
        if member.join_done is not None and not member.join_done.is_set():
            member.join_result = dict(error_code=code, generation_id=-1, protocol_type=None,
                                      protocol_name=None, leader="", member_id=member.member_id, members=[])
            member.join_done.set()
        if member.sync_done is not None and not member.sync_done.is_set():
            member.sync_result = dict(error_code=code, assignment=b"")
            member.sync_done.set()

    def _fail_pending_syncs(self, group: Group, code: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_done is not None and not member.sync_done.is_set():
                member.sync_result = dict(error_code=code, assignment=b"", protocol_type=group.protocol_type,
                                          protocol_name=group.protocol_name)
                member.sync_done.set()

    def _member_of(self, group_id: str, member_id: str, generation: int,
                   group_instance_id: str | None = None) -> tuple[Group, Member]:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.unknown_member_id, "unknown group")
        return group, self._check_member(group, member_id, generation, group_instance_id)

    def _check_member(self, group: Group, member_id: str, generation: int,
                      group_instance_id: str | None = None) -> Member:
        member = group.members.get(member_id)
        if member is None:
            if group_instance_id is not None and group_instance_id in group.static:
                raise KafkaError(ErrorCode.fenced_instance_id, f"instance {group_instance_id} has a newer member")
            raise KafkaError(ErrorCode.unknown_member_id, f"unknown member {member_id}")
        if generation != group.generation:
            raise KafkaError(ErrorCode.illegal_generation,
                             f"generation {generation} is not the group's {group.generation}")
        return member

    async def sync(self, *, group_id: str, member_id: str, generation: int, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> dict:
        group, member = self._member_of(group_id, member_id, generation, group_instance_id)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            raise KafkaError(ErrorCode.inconsistent_group_protocol, "protocol does not match the group's")
        member.last_seen = _now()
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        if group.state == GroupState.STABLE:
            return self._sync_result(group, member)
        member.sync_done = trio.Event()
        member.sync_result = None
        if member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            group.state = GroupState.STABLE
            log.info("group %s: stable at generation %d", group.group_id, group.generation)
            for each in group.members.values():
                if each.sync_done is not None and not each.sync_done.is_set():
                    each.sync_result = self._sync_result(group, each)
                    each.sync_done.set()
        await member.sync_done.wait()
        assert member.sync_result is not None  # set by the leader's sync, or by the rebalance that ended it
        return member.sync_result

    def _sync_result(self, group: Group, member: Member) -> dict:
        return dict(error_code=ErrorCode.none, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, assignment=member.assignment)

    def heartbeat(self, *, group_id: str, member_id: str, generation: int, group_instance_id: str | None) -> None:
        group = self._group(group_id)
        if group is None or group.state == GroupState.EMPTY:
            raise KafkaError(ErrorCode.unknown_member_id, "unknown group or member")
        member = self._check_member(group, member_id, generation, group_instance_id)
        member.last_seen = _now()
        if group.state == GroupState.PREPARING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[tuple[str, str | None, ErrorCode]]:
        group = self._group(group_id)
        results: list[tuple[str, str | None, ErrorCode]] = []
        if group is None:
            return [(member_id, instance_id, ErrorCode.unknown_member_id) for member_id, instance_id in leaving]
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static.get(instance_id)
                if known is not None and member_id and known != member_id:
                    results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                member = group.members.get(known) if known else None
            else:
                member = group.members.get(member_id)
            if member is None:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            log.info("group %s: member %s left", group_id, member.member_id)
            self._remove(group, member)
            removed = True
            results.append((member_id, instance_id, ErrorCode.none))  # Kafka echoes the request's id
        if removed:
            self._after_removal(group, "member left")
        return results

    def _after_removal(self, group: Group, reason: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            group.joined_changed.set()
            group.joined_changed = trio.Event()
        elif group.members:
            self._prepare_rebalance(group, reason)
        else:
            group.generation += 1
            group.state = GroupState.EMPTY
            group.leader_id = None
            group.protocol_name = None

    def _expire_sessions(self) -> None:
        now = _now()
        for group in list(self.groups.values()):
            group.pending = {m: deadline for m, deadline in group.pending.items() if deadline > now}
            expired = [m for m in group.members.values()
                       if (m.join_done is None or m.join_done.is_set())
                       and now - m.last_seen > m.session_timeout_ms / 1000]
            for member in expired:
                log.info("group %s: member %s session expired", group.group_id, member.member_id)
                self._remove(group, member)
            if expired:
                self._after_removal(group, "session expired")

    # -- offsets --------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, generation: int, group_instance_id: str | None) -> Group:
        """Kafka's rules: a commit with generation -1 and no member is a standalone commit,
        allowed while the group has no members; otherwise the member and generation must match."""
        group = self._group_or_new(group_id)
        if generation < 0 and not member_id:
            if group.members:
                raise KafkaError(ErrorCode.unknown_member_id, "the group has active members")
            return group
        if group.state == GroupState.COMPLETING_REBALANCE:
            raise KafkaError(ErrorCode.rebalance_in_progress)
        member = self._check_member(group, member_id, generation, group_instance_id)
        member.last_seen = _now()
        return group

    async def commit(self, group: Group, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        group.offsets.update(offsets)
        await self._save(group)
        await self._offsets_log.committed(group, offsets)

    async def commit_transactional(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """A committed transaction's offsets (TxnOffsetCommit), now visible."""
        if offsets:
            await self.commit(self._group_or_new(group_id), offsets)

    async def _save(self, group: Group) -> None:
        """Returns once the store holds the group's state with this change. One write at a
        time, each of the state as it is then: concurrent commits (pipelined, or by several
        members) once wrote their snapshots in parallel, and an older one landing last lost
        acknowledged offsets at the next failover. A change an earlier write already carried
        costs no write of its own."""
        group.changes += 1
        change = group.changes
        async with group.save_lock:
            if group.saved >= change:
                return
            writing = group.changes
            await self._store.save(StoredGroup(group.group_id, group.generation, group.protocol_type,
                                               dict(group.offsets)))
            group.saved = writing

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self._group(group_id)
        return {} if group is None else group.offsets

    async def delete_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> None:
        for key in partitions:
            group.offsets.pop(key, None)
        await self._save(group)
        await self._offsets_log.deleted(group.group_id, partitions, whole_group=False)

    async def delete_group(self, group_id: str) -> None:
        group = self._group(group_id)
        if group is None:
            raise KafkaError(ErrorCode.group_id_not_found, f"group {group_id!r} does not exist")
        if group.members:
            raise KafkaError(ErrorCode.non_empty_group, f"group {group_id!r} has members")
        group.state = GroupState.DEAD
        del self.groups[group_id]
        async with group.save_lock:  # after any write in flight, which would bring it back
            await self._store.delete(group_id)
        await self._offsets_log.deleted(group_id, list(group.offsets), whole_group=True)

    async def forget_topic(self, topic: str) -> None:
        """Offsets of a deleted topic are removed from every group."""
        for group in list(self.groups.values()):
            stale = [key for key in group.offsets if key[0] == topic]
            if stale:
                await self.delete_offsets(group, stale)

