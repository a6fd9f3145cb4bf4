"""The share coordinator: the trio driver of share groups (:mod:`.group`), share sessions and
share-partitions (:mod:`.partition`), and their durable state (:mod:`.store`).

Heartbeats reach the group's coordinator (its slot's owner, as for every group); fetches
and acknowledgements reach the partition's owner, which holds the share-partition. An
acknowledgement is answered once the share-partition's state holding it is stored (the
saves of concurrent acknowledgements are coalesced: one write covers every change made
while the one before it ran). Releases, expiries and archives are written by the timer a
moment later: a gateway that dies before loses nothing a client was told of.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.records import BatchHeader, parse_batch_header
from kafscale.protocol.transactions import AbortedBatches
from kafscale.storage_backends import ObjectChanged, ObjectExists

from ..groups.settings import GroupSettings
from ..log import PartitionLog
from ..maintenance import MaintenanceFailures
from .group import ShareAnswer, ShareBeat, ShareGroup
from .partition import Acknowledgement, Acquired, Limits, LogBatch, SharePartition
from .store import ShareKey, ShareStateStore, StoredShare

__all__ = ["ShareCoordinator", "ShareSession", "Fetched"]

log = logging.getLogger("kafscale.shares")

TICK_S = 0.2  # how often locks and sessions are checked, and changes not yet stored written
OPEN_EPOCH = 0  # a share session's first request
CLOSE_EPOCH = -1  # its last


@dataclass(eq=False)
class ShareSession:
    """A member's share session: the partitions its ShareFetch requests fetch (Kafka's share
    session), and the epoch its next request must carry."""

    group_id: str
    member_id: str
    used_at: float  # trio time of its last request
    epoch: int = 1
    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)  # in the order added
    turn: int = 0  # where the last request began among the partitions

    def advance(self, now: float) -> None:
        self.epoch = self.epoch + 1 if self.epoch < 2**31 - 1 else 1
        self.used_at = now

    def in_turn(self) -> list[tuple[uuid.UUID, int]]:
        """The session's partitions, starting one further each request: a fetch fills up from
        the first, so no partition's backlog keeps the others waiting."""
        partitions = list(self.partitions)
        if not partitions:
            return partitions
        self.turn = (self.turn + 1) % len(partitions)
        return partitions[self.turn:] + partitions[:self.turn]

    def track(self, added: Iterable[tuple[uuid.UUID, int]], forgotten: Iterable[tuple[uuid.UUID, int]]) -> None:
        """A request's partitions join the session; its forgotten ones leave it."""
        for part in added:
            self.partitions[part] = None
        for part in forgotten:
            self.partitions.pop(part, None)


@dataclass(frozen=True, slots=True)
class Fetched:
    records: list[memoryview]
    acquired: list[Acquired]

    @property
    def size(self) -> int:
        return sum(len(view) for view in self.records)


@dataclass(eq=False)
class _Held:
    """A share-partition this gateway holds, over the partition log it reads."""

    key: ShareKey
    topic: str  # its name when held (the store keeps it for people reading it)
    log: PartitionLog
    state: SharePartition
    stored_version: str | None  # the store's version of it (None: not stored yet)
    saved: int = -1  # ``state.version`` when last stored
    lock: trio.Lock = field(default_factory=trio.Lock)


class ShareCoordinator:
    def __init__(self, store: ShareStateStore, settings_of: Callable[[str], GroupSettings],
                 failures: MaintenanceFailures, *, session_slots: int) -> None:
        self._store = store
        self._settings_of = settings_of  # the gateway's group settings under one group's configs
        self._failures = failures
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._session_slots = session_slots
        self._held: dict[ShareKey, _Held] = {}
        self._loading: dict[ShareKey, trio.Lock] = {}
        self._released = trio.Event()  # set when records become available again
        self.stored_groups: set[str] = set()  # groups with stored state (for ListGroups)
        self.saves = 0  # state writes so far (the bench counts them per acknowledgement)
        self.acquired = 0  # records acquired so far
        self.acknowledged = 0  # records acknowledged so far

    async def load(self) -> None:
        self.stored_groups = await self._store.stored_groups()

    def limits(self, group_id: str) -> Limits:
        return _limits(self._settings_of(group_id))

    # -- membership ------------------------------------------------------------------------

    def heartbeat(self, group_id: str, beat: ShareBeat, topics: Mapping[str, int]) -> ShareAnswer:
        group = self.groups.get(group_id)
        if group is None:
            group = ShareGroup(group_id, self._settings_of(group_id))
        else:
            group.settings = self._settings_of(group_id)  # its configs may have changed
        answer = group.heartbeat(beat, topics, trio.current_time())
        if group.members:
            self.groups[group_id] = group
        if beat.member_epoch == -1:
            self._release_member(group_id, beat.member_id)
        return answer

    # -- sessions --------------------------------------------------------------------------

    def session_for(self, group_id: str, member_id: str, epoch: int, *, may_open: bool) -> ShareSession | None:
        """The share session a request of ``epoch`` belongs to: 0 opens one (a ShareFetch may;
        a member's earlier session is closed, its records given back), -1 names the one the
        request closes (None: the caller closes it once the request's acknowledgements are
        applied), any other epoch must be the session's next."""
        if epoch == OPEN_EPOCH:
            if not may_open:
                raise KafkaError(ErrorCode.invalid_share_session_epoch, "only a ShareFetch opens a share session")
            return self._open_session(group_id, member_id)
        share_session = self.sessions.get((group_id, member_id))
        if share_session is None:
            raise KafkaError(ErrorCode.share_session_not_found, f"no share session of {member_id!r} here")
        if epoch == CLOSE_EPOCH:
            return None
        if epoch != share_session.epoch:
            raise KafkaError(ErrorCode.invalid_share_session_epoch,
                             f"share session epoch {epoch}, expected {share_session.epoch}")
        share_session.advance(trio.current_time())
        return share_session

    def _open_session(self, group_id: str, member_id: str) -> ShareSession:
        if (group_id, member_id) in self.sessions:
            self.close_session(group_id, member_id)
        elif len(self.sessions) >= self._session_slots:
            raise KafkaError(ErrorCode.share_session_limit_reached,
                             f"{len(self.sessions)} share sessions are open, the most this gateway keeps")
        share_session = self.sessions[group_id, member_id] = ShareSession(group_id, member_id, trio.current_time())
        return share_session

    def close_session(self, group_id: str, member_id: str) -> None:
        """Epoch -1 (or a new session): what the member holds here is given back."""
        if self.sessions.pop((group_id, member_id), None) is not None:
            self._release_member(group_id, member_id)

    def _release_member(self, group_id: str, member_id: str) -> None:
        limits = self.limits(group_id)
        released = sum(held.state.release_member(member_id, limits)
                       for held in self._held.values() if held.key.group_id == group_id)
        if released:
            self._wake()

    # -- share-partitions ------------------------------------------------------------------

    async def hold(self, key: ShareKey, topic: str, partition_log: PartitionLog) -> _Held:
        """The share-partition of ``key`` over ``partition_log``: loaded from the store, or
        started where the group's share.auto.offset.reset says (and stored at once, so the
        start a group was given outlives the gateway)."""
        held = self._held.get(key)
        if held is not None and held.log is partition_log:
            return held
        async with self._loading.setdefault(key, trio.Lock()):
            held = self._held.get(key)
            if held is not None and held.log is partition_log:
                return held
            try:
                loaded = await self._store.load(key)
            except ValueError as exc:  # never started empty over it: that would deliver accepted records again
                log.error("share-partition %s is not served: its stored state %s is unreadable (%s); repair or "
                          "remove it", key, self._store.key(key), exc)
                raise KafkaError(ErrorCode.unknown_server_error,
                                 f"the stored state of share-partition {key} is unreadable") from None
            if loaded is None:
                settings = self._settings_of(key.group_id)
                start = (partition_log.log_start_offset if settings.share_auto_offset_reset == "earliest"
                         else partition_log.high_watermark)
                held = _Held(key, topic, partition_log, SharePartition(start), None)
            else:
                stored, version = loaded
                held = _Held(key, topic, partition_log, SharePartition(stored.start, stored.batches,
                                                                state_epoch=stored.state_epoch), version)
                held.saved = held.state.version
            held.state.trim(partition_log.log_start_offset)
            self._held[key] = held
            self.stored_groups.add(key.group_id)
            if held.stored_version is None:
                await self._save(held)
            return held

    async def acquire(self, key: ShareKey, topic: str, partition_log: PartitionLog, member_id: str,
                      max_records: int, max_bytes: int) -> Fetched:
        """Acquire for ``member_id`` the next available records of one share-partition."""
        held = await self.hold(key, topic, partition_log)
        settings = self._settings_of(key.group_id)
        limits = _limits(settings)
        state = held.state
        state.trim(partition_log.log_start_offset)
        committed_only = settings.share_isolation_level == "read_committed"
        end = partition_log.last_stable_offset if committed_only else partition_log.high_watermark
        offset = state.next_wanted()
        if offset >= end or offset >= state.start + limits.max_in_flight or max_records <= 0:
            return Fetched([], [])
        views = await partition_log.read(offset, max_bytes, allow_oversize=True, end=end)
        aborted = AbortedBatches(partition_log.aborted_between(offset, end)) if committed_only else None
        batches: list[tuple[BatchHeader, memoryview]] = []
        for view in views:
            position = 0
            while position < len(view):
                header = parse_batch_header(view, position)
                batches.append((header, view[position:position + header.size]))
                position += header.size
        acquired = state.acquire(
            member_id, [LogBatch(h.base_offset, h.last_offset,
                                 h.is_control or (aborted is not None and h in aborted)) for h, _ in batches],
            offset, max_records, trio.current_time(), limits)
        self.acquired += sum(a.last - a.first + 1 for a in acquired)
        records = [view for header, view in batches
                   if any(a.first <= header.last_offset and a.last >= header.base_offset for a in acquired)]
        return Fetched(records, acquired)

    async def acknowledge(self, key: ShareKey, topic: str, partition_log: PartitionLog, member_id: str,
                          batches: Iterable[Acknowledgement]) -> None:
        """Apply a member's acknowledgements of one share-partition, all or none, and store
        them before returning."""
        held = await self.hold(key, topic, partition_log)
        held.state.trim(partition_log.log_start_offset)  # records deleted meanwhile are no longer in flight
        batches = list(batches)
        if held.state.acknowledge(member_id, batches, trio.current_time(), self.limits(key.group_id)):
            self._wake()  # a record given back, or room in flight: waiting fetches may acquire
        self.acknowledged += sum(batch.last - batch.first + 1 for batch in batches)
        await self._save(held)

    async def _save(self, held: _Held) -> None:
        """Store ``held`` as it is now, unless a save that began since its last change has
        done so (concurrent callers share one write)."""
        wanted = held.state.version
        async with held.lock:
            if held.saved >= wanted and held.stored_version is not None:
                return
            version = held.state.version
            state = StoredShare(held.key.group_id, held.topic, held.state.start, held.state.state_epoch,
                                tuple(held.state.states()))
            try:
                held.stored_version = await self._store.save(held.key, state, held.stored_version)
            except (ObjectChanged, ObjectExists):
                # Another gateway holds it now (or held it meanwhile): what this one holds is stale.
                if self._held.get(held.key) is held:
                    del self._held[held.key]
                raise KafkaError(ErrorCode.not_leader_or_follower,
                                 f"share-partition {held.key} was written by another gateway") from None
            held.saved = version
            self.saves += 1

    def _wake(self) -> None:
        self._released.set()
        self._released = trio.Event()

    def released(self) -> trio.Event:
        """Set when records are given back (what a waiting fetch may now acquire)."""
        return self._released

    def knows(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group's (live, or with stored state)."""
        return group_id in self.groups or group_id in self.stored_groups

    def listed(self) -> dict[str, str]:
        """Every share group known here, and its state."""
        listed = {group_id: "Empty" for group_id in self.stored_groups}
        listed.update((group_id, group.state) for group_id, group in self.groups.items())
        return listed

    async def delete_group(self, group_id: str) -> None:
        """DeleteGroups of a share group: refused while it has members; its state goes."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise KafkaError(ErrorCode.non_empty_group, f"share group {group_id!r} has members")
        if not self.knows(group_id):
            raise KafkaError(ErrorCode.group_id_not_found, f"no share group {group_id!r}")
        await self._store.delete(await self._store.stored_partitions(group_id))
        for key in [k for k in self._held if k.group_id == group_id]:
            del self._held[key]
            self._loading.pop(key, None)
        self.groups.pop(group_id, None)
        self.stored_groups.discard(group_id)

    async def start_of(self, key: ShareKey) -> tuple[int, int] | None:
        """The share-partition's start offset and its in-flight records done with (accepted
        or archived past the start; lag counts neither), or None when it has no state."""
        held = self._held.get(key)
        if held is not None:
            return held.state.start, held.state.done_in_flight()
        loaded = await self._store.load(key)
        if loaded is None:
            return None
        stored, _ = loaded
        return stored.start, SharePartition(stored.start, stored.batches).done_in_flight()

    def require_empty(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise KafkaError(ErrorCode.non_empty_group, f"share group {group_id!r} has members: stop them first")

    async def reset(self, key: ShareKey, topic: str, start: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts at ``start``, nothing in flight
        (the group must have no members)."""
        self.require_empty(key.group_id)
        held = self._held.get(key)
        if held is not None:
            held.state.reset(start)
            await self._save(held)
            return
        loaded = await self._store.load(key)
        epoch = 0 if loaded is None else loaded[0].state_epoch + 1
        try:
            await self._store.save(key, StoredShare(key.group_id, topic, start, epoch, ()),
                                   None if loaded is None else loaded[1])
        except (ObjectChanged, ObjectExists):
            raise KafkaError(ErrorCode.rebalance_in_progress,
                             f"share-partition {key} changed meanwhile; try again") from None
        self.stored_groups.add(key.group_id)

    async def delete_topic_state(self, group_id: str, topic_id: uuid.UUID) -> None:
        """DeleteShareGroupOffsets: the group's state of one topic goes (the group must have
        no members); the topic is read from the reset point again."""
        self.require_empty(group_id)
        for key in [k for k in self._held if k.group_id == group_id and k.topic_id == topic_id]:
            del self._held[key]
        await self._store.delete([k for k in await self._store.stored_partitions(group_id) if k.topic_id == topic_id])

    async def stored_keys(self, group_id: str) -> list[ShareKey]:
        keys = set(await self._store.stored_partitions(group_id))
        keys.update(k for k in self._held if k.group_id == group_id)
        return sorted(keys, key=lambda k: (str(k.topic_id), k.partition))

    async def forget_topic(self, topic_id: uuid.UUID) -> None:
        """A deleted topic's share state goes with it (every group's)."""
        for key in [k for k in self._held if k.topic_id == topic_id]:
            del self._held[key]
            self._loading.pop(key, None)
        await self._store.delete_topic(topic_id)

    def held_keys(self) -> list[ShareKey]:
        return list(self._held)

    def held_state(self, key: ShareKey) -> SharePartition | None:
        held = self._held.get(key)
        return None if held is None else held.state

    # -- the timer -------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Members past their session timeout removed, locks past their duration ended, and
        the changes not yet stored written, every tick; a failure is logged and skipped."""
        task_status.started()
        while True:
            await trio.sleep(TICK_S)
            await self.tick(trio.current_time())

    async def tick(self, now: float) -> None:
        for group_id, group in list(self.groups.items()):
            for member in group.expire(now):
                log.info("share group %r: member %s removed after its session timeout", group_id, member.member_id)
                self._release_member(group_id, member.member_id)
                self.sessions.pop((group_id, member.member_id), None)
        # A session unused for a member's session timeout is a member gone without closing it
        # (in a cluster the gateway holding it may not be the group's coordinator).
        for share_session in list(self.sessions.values()):
            timeout_s = self._settings_of(share_session.group_id).share_session_timeout_ms / 1000
            if share_session.used_at + timeout_s <= now:
                self.close_session(share_session.group_id, share_session.member_id)
        expired = 0
        for held in list(self._held.values()):
            expired += held.state.expire(now, self.limits(held.key.group_id))
        if expired:
            self._wake()
        for held in list(self._held.values()):
            if held.state.version != held.saved:
                with self._failures.guard("share state writes", str(held.key)):
                    await self._save(held)


def _limits(settings: GroupSettings) -> Limits:
    return Limits(settings.share_record_lock_duration_ms / 1000, settings.share_delivery_count_limit,
                  settings.share_partition_max_record_locks)
