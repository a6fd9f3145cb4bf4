"""The group coordinator: the trio driver of the groups' state machines, and their storage.

Membership is decided by pure machines (:mod:`.classic` for JoinGroup/SyncGroup,
:mod:`.consumer` for the consumer protocol of KIP-848); this module feeds them events and the
time, parks the requests they park until their answers leave the machine's outbox, runs one
timer task for every group, and saves what must outlive the gateway in the group store:
committed offsets and the generation, and a consumer-protocol group's members, epochs and
assignments.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError

from ..ownership import Mode
from .classic import ClassicGroup, GroupState, JoinAnswer, JoinRequest, Parked, RebalanceBegan
from .configs import GroupConfigs, settings_with
from .consumer import ConsumerGroup, Heartbeat, HeartbeatAnswer
from .migration import downgraded, upgraded
from .offsets_topic import OffsetsLog
from .settings import GroupSettings
from .store import CommittedOffset, GroupStore, LoadedGroups, StoredGroup, slot_of

__all__ = ["GroupCoordinator", "GroupState", "GroupSettings", "Group"]

log = logging.getLogger("kafscale.groups")

Group = ClassicGroup | ConsumerGroup


@dataclass(eq=False)
class _Answer:
    """Where a parked request's answer arrives."""

    ready: trio.Event = field(default_factory=trio.Event)
    result: dict | None = None


@dataclass(eq=False)
class _Saving:
    """Saves of one group's stored state (offsets, generation), one at a time: see GroupCoordinator._save."""

    lock: trio.Lock = field(default_factory=trio.Lock)
    changes: int = 0  # changes to the stored state so far
    saved: int = 0  # how many of them the store holds


def _now() -> float:
    return trio.current_time()


class GroupCoordinator:
    def __init__(self, store: GroupStore, settings: GroupSettings,
                 on_rebalance: Callable[[str], None] = lambda group_id: None, *,
                 offsets_log: OffsetsLog, configs: GroupConfigs, mode: Mode, slots: int) -> None:
        self._store = store
        self._offsets_log = offsets_log  # __consumer_offsets for readers (a lone gateway's)
        self.settings = settings
        self.configs = configs  # groups' own configs over ``settings`` (IncrementalAlterConfigs)
        self._on_rebalance = on_rebalance
        self.groups: dict[str, Group] = {}
        self._answers: dict[tuple[str, str, str], _Answer] = {}  # (group, "join"|"sync", member) → waiting
        self._saving: dict[str, _Saving] = {}
        self._wake = trio.Event()  # set when a group's next deadline comes before _wake_at
        self._wake_at = 0.0
        # Which groups this gateway coordinates: all of them alone; in a cluster the groups of
        # the coordinator slots (``slots`` of them in the cluster) it adopted.
        self.slots = slots
        self._every_slot = mode is Mode.EMBEDDED
        self._owned_slots: set[int] = set()
        self._loading_slots: set[int] = set()
        # Groups whose stored state does not parse: refused (COORDINATOR_NOT_AVAILABLE) rather
        # than started empty, which would reset their consumers and overwrite what is stored.
        self.damaged: dict[str, str] = {}

    def settings_of(self, group_id: str) -> GroupSettings:
        """The gateway's group settings with the group's own configs over them."""
        return settings_with(self.settings, self.configs.of(group_id))

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
        group: Group
        if stored.kind == ConsumerGroup.kind and stored.membership is not None:
            # Its members carry on at their epochs, with their partitions.
            group = ConsumerGroup.restore(stored.group_id, self.settings_of(stored.group_id), stored.membership,
                                          dict(stored.offsets), _now())
        elif stored.kind == ConsumerGroup.kind:
            group = ConsumerGroup(stored.group_id, self.settings_of(stored.group_id), group_epoch=stored.generation,
                                  assignment_epoch=stored.generation, offsets=dict(stored.offsets))
        else:
            group = ClassicGroup(stored.group_id, self.settings, generation=stored.generation,
                                 protocol_type=stored.protocol_type, offsets=dict(stored.offsets))
        self.groups[stored.group_id] = group

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
            group.dissolve(ErrorCode.not_coordinator)
            self._deliver(group)
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
        """Runs the groups' timers (rebalance delays and timeouts, sessions) and ``__consumer_offsets``."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._offsets_log.run)
            task_status.started()
            while True:
                # Not sooner than 10 ms after the last ticks: a deadline a tick failed to clear
                # (a bug) costs a hundred ticks a second, not a core.
                self._wake_at = wake_at = max(_now() + 0.01, min(
                    (d for g in self.groups.values() if (d := g.next_deadline()) is not None), default=_now() + 1.0))
                with trio.move_on_at(wake_at):
                    await self._wake.wait()
                now = _now()
                for group in list(self.groups.values()):
                    try:
                        changes = group.changes if isinstance(group, ConsumerGroup) else 0
                        group.tick(now)
                        self._deliver(group)
                        if isinstance(group, ConsumerGroup) and group.changes != changes:
                            # members it removed (the last consumer-protocol one, maybe)
                            nursery.start_soon(self._save_after_tick, self._maybe_downgrade(group, now))
                    except Exception:  # a bug here must cost one group's timers, not the gateway
                        log.exception("group %s: its timers failed", group.group_id)
                self._wake = trio.Event()  # after the ticks, whose own deliveries set it

    # -- driving the machines -------------------------------------------------------------------

    def _deliver(self, group: Group) -> None:
        """Hands the answers the machine produced to the requests parked for them."""
        for effect in group.take_effects():
            if isinstance(effect, RebalanceBegan):
                self._on_rebalance(group.group_id)
                continue
            kind = "join" if isinstance(effect, JoinAnswer) else "sync"
            answer = self._answers.pop((group.group_id, kind, effect.member_id), None)
            if answer is not None:
                answer.result = effect.result
                answer.ready.set()
        self._rearm(group)

    def _rearm(self, group: Group) -> None:
        """Wakes the timer task if this group's next deadline comes before its next wake-up."""
        deadline = group.next_deadline()
        if deadline is not None and deadline < self._wake_at:
            self._wake.set()

    async def _outcome(self, group: Group, kind: str, outcome: dict | Parked) -> dict:
        if not isinstance(outcome, Parked):
            self._deliver(group)
            return outcome
        answer = self._answers.setdefault((group.group_id, kind, outcome.member_id), _Answer())
        self._deliver(group)  # which may be this request's own answer
        await answer.ready.wait()
        assert answer.result is not None
        return answer.result

    def _group(self, group_id: str) -> Group | None:
        """The group, if it exists (and this gateway coordinates it)."""
        self.check_coordinator(group_id)
        return self.groups.get(group_id)

    def _group_or_new(self, group_id: str) -> Group:
        """The group, created empty (classic) if it does not exist."""
        group = self._group(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, self.settings)
        return group

    def _classic(self, group_id: str) -> Group | None:
        """The group for a classic-protocol request: a classic group, or a consumer-protocol
        group with members, which hosts the classic member (KIP-848's online migration). An
        empty consumer-protocol group becomes a classic one, keeping its offsets."""
        group = self._group(group_id)
        if isinstance(group, ConsumerGroup):
            if group.members:
                group.settings = self.settings_of(group_id)
                return group
            group = self.groups[group_id] = ClassicGroup(group_id, self.settings, generation=group.group_epoch,
                                                         offsets=group.offsets)
        return group

    def _consumer(self, group_id: str, topics: Mapping[str, int]) -> ConsumerGroup:
        """The group for a ConsumerGroupHeartbeat: a classic group (or none) becomes a
        consumer-protocol group, keeping its offsets, and its members carry on in it as
        classic members (online migration, while it is stable). A group made here is the
        caller's to install, once the heartbeat that made it is accepted."""
        group = self._group(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is not None and group.members:
            return upgraded(group, self.settings_of(group_id), topics, _now())
        return ConsumerGroup(group_id, self.settings_of(group_id), group_epoch=group.generation if group else 0,
                             assignment_epoch=group.generation if group else 0,
                             offsets=group.offsets if group else {})

    def _maybe_downgrade(self, group: Group, now: float) -> Group:
        """A consumer-protocol group whose members all speak the classic protocol goes back to
        classic (they are asked to join again)."""
        if isinstance(group, ConsumerGroup) and group.only_classic_members:
            classic = self.groups[group.group_id] = downgraded(group, now)
            self._deliver(classic)
            return classic
        return group

    async def consumer_heartbeat(self, group_id: str, beat: Heartbeat, topics: Mapping[str, int]) -> HeartbeatAnswer:
        """A ConsumerGroupHeartbeat (KIP-848); ``topics``: the cluster's topics and their partition counts.
        Answered once the store holds what it changed (epochs, assignments), as Kafka answers once
        its records are written: a new coordinator then carries on from what members were told."""
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "group id must not be empty")
        group = self._consumer(group_id, topics)
        group.settings = self.settings_of(group_id)  # its configs may have changed since
        changes = group.changes
        now = _now()
        answer = group.heartbeat(beat, topics, now)  # (a refused one changes no group's protocol)
        self.groups[group_id] = group
        self._rearm(group)
        if group.changes != changes:
            await self._save(self._maybe_downgrade(group, now))
        return answer

    async def join(
        self, *, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
        client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
        protocols: list[tuple[str, bytes]], require_known_member_id: bool, supports_skip_assignment: bool,
        topics: Callable[[], Mapping[str, int]],
    ) -> dict:
        """A JoinGroup; ``topics``: the cluster's topics and their partition counts, asked for
        only when a consumer-protocol group hosts the member."""
        if not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "group id must not be empty")
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self._classic(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, self.settings)
        request = JoinRequest(member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                              rebalance_timeout_ms, protocol_type, protocols, require_known_member_id,
                              supports_skip_assignment)
        if isinstance(group, ConsumerGroup):
            result = group.classic_join(request, topics(), _now())
            self._rearm(group)
            await self._save(group)  # its epoch and partitions, before it is told them
            return result
        return await self._outcome(group, "join", group.join(request, _now()))

    async def sync(self, *, group_id: str, member_id: str, generation: int, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> dict:
        group = self._classic(group_id)
        if group is None:
            raise KafkaError(ErrorCode.unknown_member_id, "unknown group")
        if isinstance(group, ConsumerGroup):
            return group.classic_sync(member_id, generation, group_instance_id)
        outcome = group.sync(member_id=member_id, generation=generation, group_instance_id=group_instance_id,
                             protocol_type=protocol_type, protocol_name=protocol_name, assignments=assignments,
                             now=_now())
        return await self._outcome(group, "sync", outcome)

    def heartbeat(self, *, group_id: str, member_id: str, generation: int, group_instance_id: str | None) -> None:
        group = self._classic(group_id)
        if group is None:
            raise KafkaError(ErrorCode.unknown_member_id, "unknown group or member")
        if isinstance(group, ConsumerGroup):
            group.classic_heartbeat(member_id, generation, group_instance_id, _now())
            return
        group.heartbeat(member_id=member_id, generation=generation, group_instance_id=group_instance_id,
                        now=_now())

    async def leave(self, group_id: str,
                    leaving: list[tuple[str, str | None]]) -> list[tuple[str, str | None, ErrorCode]]:
        group = self._classic(group_id)
        if group is None:
            return [(member_id, instance_id, ErrorCode.unknown_member_id) for member_id, instance_id in leaving]
        if isinstance(group, ConsumerGroup):
            results = [(member_id, instance_id, group.classic_leave(member_id, instance_id))
                       for member_id, instance_id in leaving]
            await self._save(group)
            return results
        results = group.leave(leaving, _now())
        self._deliver(group)
        return results

    # -- offsets --------------------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, generation: int, group_instance_id: str | None) -> Group:
        """The group a commit goes to, once its member and generation (or member epoch) pass
        the group's rules; created empty for a standalone commit to a new group."""
        group = self._group_or_new(group_id)
        group.check_commit(member_id, generation, group_instance_id, _now())
        return group

    def check_fetch(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """OffsetFetch v9+: a consumer-protocol member names itself and its epoch (-1: not a member)."""
        group = self._group(group_id)
        if isinstance(group, ConsumerGroup) and member_epoch >= 0:
            group.check_commit(member_id, member_epoch, None, _now())

    async def commit(self, group: Group, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        group.offsets.update(offsets)
        await self._save(group)
        await self._offsets_log.committed(group, offsets)

    async def commit_transactional(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """A committed transaction's offsets (TxnOffsetCommit), now visible."""
        if offsets:
            await self.commit(self._group_or_new(group_id), offsets)

    async def _save_after_tick(self, group: Group) -> None:
        try:
            await self._save(group)
        except Exception as exc:  # the next change saves again; meanwhile the stored state is older, not wrong
            log.warning("group %s: saving after its members expired failed: %r", group.group_id, exc)

    async def _save(self, group: Group) -> None:
        """Returns once the store holds the group's state with this change. One write at a
        time, each of the state as it is then: concurrent commits (pipelined, or by several
        members) once wrote their snapshots in parallel, and an older one landing last lost
        acknowledged offsets at the next failover. A change an earlier write already carried
        costs no write of its own."""
        saving = self._saving.setdefault(group.group_id, _Saving())
        saving.changes += 1
        change = saving.changes
        async with saving.lock:
            if saving.saved >= change:
                return
            writing = saving.changes
            membership = group.snapshot() if isinstance(group, ConsumerGroup) else None
            await self._store.save(StoredGroup(group.group_id, group.generation, group.protocol_type,
                                               dict(group.offsets), kind=group.kind, membership=membership))
            saving.saved = writing

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
        group.dissolve(ErrorCode.group_id_not_found)
        del self.groups[group_id]
        saving = self._saving.pop(group_id, _Saving())
        async with saving.lock:  # after any write in flight, which would bring it back
            await self._store.delete(group_id)
        await self._offsets_log.deleted(group_id, list(group.offsets), whole_group=True)

    async def forget_topic(self, topic: str) -> None:
        """Offsets of a deleted topic are removed from every group."""
        for group in list(self.groups.values()):
            stale = [key for key in group.offsets if key[0] == topic]
            if stale:
                await self.delete_offsets(group, stale)

