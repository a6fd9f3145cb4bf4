"""``__consumer_offsets`` for readers: every group's commits and group metadata, in Kafka's
own schemas (:mod:`kafscale.protocol.group_records`), as an internal, compacted topic that
lag tools consume (Burrow, older lag exporters, mirror tooling).

The groups' state of record stays the group store; this topic mirrors it, written by the
coordinator after each commit is durable there: an append that fails is logged and
counted, never fails the commit. Created by the gateway (never by clients, who may only
read it) with Kafka's ``offsets.topic.num.partitions`` once there are groups (as Kafka
creates it at the first group's coordinator lookup); the state of the groups that exist
then is written into it once.

A lone gateway writes it as its coordinator commits (:class:`OffsetsTopic`). In a cluster
a group's coordinator and the owner of its ``__consumer_offsets`` partition are different
gateways: each partition's owner follows the groups' stored state through etcd's watch
and writes what changed in the groups of its partitions, all of it when it takes a
partition over (:class:`ClusterOffsetsTopic`). There a group's metadata record carries its
generation and protocol type, not its members (etcd holds no members).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import trio

from kafscale.protocol.group_records import (
    OFFSETS_TOPIC,
    GroupMember,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    offsets_partition,
)
from kafscale.protocol.records import BatchHeader, build_batch, split_batches

from ..clock import Clock
from ..maintenance import MaintenanceFailures
from ..ownership import Ownership
from .store import CommittedOffset, StoredGroup

__all__ = ["OffsetsLog", "OffsetsTopic", "ClusterOffsetsTopic", "NoOffsetsTopic", "GroupChanges", "OFFSETS_TOPIC"]

log = logging.getLogger("kafscale.groups")


class GroupView(Protocol):
    """What is written of a group: its generation, protocol, members and offsets."""

    @property
    def group_id(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def protocol_type(self) -> str | None: ...
    @property
    def protocol_name(self) -> str | None: ...
    @property
    def leader_id(self) -> str | None: ...
    @property
    def offsets(self) -> dict[tuple[str, int], CommittedOffset]: ...

    def member_records(self) -> list[GroupMember]: ...


class OffsetsLog(Protocol):
    async def start(self, groups: Mapping[str, GroupView]) -> None: ...
    async def run(self) -> None: ...
    async def committed(self, group: GroupView, offsets: dict[tuple[str, int], CommittedOffset]) -> None: ...
    async def deleted(self, group_id: str, partitions: Iterable[tuple[str, int]], *, whole_group: bool) -> None: ...


class NoOffsetsTopic:
    """No ``__consumer_offsets`` (unit tests of the coordinator)."""

    async def start(self, groups) -> None:
        """Nothing to create."""

    async def run(self) -> None:
        """Nothing to follow."""

    async def committed(self, group, offsets) -> None:
        """Nothing mirrored."""

    async def deleted(self, group_id, partitions, *, whole_group: bool) -> None:
        """Nothing mirrored."""


class TopicLogs(Protocol):
    """What the mirror needs of the log manager."""

    def topics(self) -> dict: ...

    @property
    def clock(self) -> Clock: ...

    async def get(self, topic: str, partition: int) -> Appendable: ...
    async def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> object: ...


class OwnedTopicLogs(TopicLogs, Protocol):
    @property
    def ownership(self) -> Ownership: ...


class Appendable(Protocol):
    def append(self, record_set: bytearray, headers: list[BatchHeader]) -> tuple[int, object]: ...


class OffsetsTopic:
    """A lone gateway's ``__consumer_offsets``."""

    def __init__(self, logs: TopicLogs, partitions: int, failures: MaintenanceFailures) -> None:
        self._logs = logs
        self.partitions = partitions
        self._failures = failures
        self._groups: Mapping[str, GroupView] = {}  # the coordinator's groups, for the first snapshot
        self._generations: dict[str, int] = {}  # the generation last written per group

    async def run(self) -> None:
        """Alone, commits are written as they are made: nothing to follow."""

    async def start(self, groups: Mapping[str, GroupView]) -> None:
        """At start, with the coordinator's groups: the topic is created if there are any."""
        self._groups = groups
        if groups:
            with self._failures.guard(OFFSETS_TOPIC, "creating it"):
                await self._created()

    async def _created(self) -> bool:
        """Whether the topic existed: if not, it is created with every group's state."""
        if OFFSETS_TOPIC in self._logs.topics():
            return True
        await self._logs.create_internal_topic(OFFSETS_TOPIC, self.partitions, {"cleanup.policy": "compact"})
        log.info("created %s (%d partitions) with the state of %d groups", OFFSETS_TOPIC, self.partitions,
                 len(self._groups))
        for group in list(self._groups.values()):
            await self._write(group, group.offsets)
        return False

    async def committed(self, group: GroupView, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        with self._failures.guard(OFFSETS_TOPIC, "creating it"):
            if not await self._created():
                return  # its state was in the first snapshot
        await self._write(group, offsets)

    async def _write(self, group: GroupView, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        records: list[tuple[bytes, bytes | None]] = []
        if self._generations.get(group.group_id) != group.generation:
            self._generations[group.group_id] = group.generation
            records.append(_group_record(group.group_id, group.protocol_type, group.generation, group.protocol_name,
                                         group.leader_id, group.member_records(), self._logs.clock.now_ms()))
        records += _offset_records(group.group_id, offsets)
        await _append(self._logs, self._failures, self.partitions, group.group_id, records)

    async def deleted(self, group_id: str, partitions: Iterable[tuple[str, int]], *, whole_group: bool) -> None:
        """Tombstones: the group's offsets of ``partitions`` (and the group itself) are gone."""
        if OFFSETS_TOPIC not in self._logs.topics():
            return  # nothing was written of it
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group_id, topic, partition), None) for topic, partition in sorted(partitions)]
        if whole_group:
            records.append((group_metadata_key(group_id), None))
            self._generations.pop(group_id, None)
        await _append(self._logs, self._failures, self.partitions, group_id, records)


def _group_record(group_id: str, protocol_type: str | None, generation: int, protocol: str | None,
                  leader: str | None, members: list[GroupMember], now_ms: int) -> tuple[bytes, bytes]:
    return group_metadata_key(group_id), group_metadata_value(protocol_type or "", generation, protocol, leader,
                                                              now_ms, members)


def _offset_records(group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset]
                    ) -> list[tuple[bytes, bytes | None]]:
    return [(offset_commit_key(group_id, topic, partition), offset_commit_value(
        committed.offset, committed.leader_epoch, committed.metadata, committed.commit_ms))
        for (topic, partition), committed in sorted(offsets.items())]


async def _append(logs: TopicLogs, failures: MaintenanceFailures, partitions: int, group_id: str,
                  records: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    if not records:
        return
    with failures.guard(OFFSETS_TOPIC, repr(group_id)):  # the commit stands whatever happens here
        partition_log = await logs.get(OFFSETS_TOPIC, offsets_partition(group_id, partitions))
        batch = bytearray(build_batch(records, base_timestamp=logs.clock.now_ms()))
        partition_log.append(batch, split_batches(batch))


class GroupChanges(Protocol):
    """The groups' stored state as it changes (a cluster's etcd)."""

    async def follow(self, changed: Callable[[str, StoredGroup | None], None]) -> None:
        """Run until cancelled: ``changed(group_id, state)`` for every group there is, then for
        every change (``None``: deleted); all of them again after a broken watch."""
        ...


class ClusterOffsetsTopic:
    """A cluster gateway's part of ``__consumer_offsets``: the partitions it owns, written
    from the groups' stored state (see the module's docstring)."""

    def __init__(self, logs: OwnedTopicLogs, partitions: int, failures: MaintenanceFailures,
                 changes: GroupChanges, check_interval_s: float = 1.0) -> None:
        self._logs = logs
        self.partitions = partitions
        self._failures = failures
        self._changes = changes
        self._check_interval_s = check_interval_s
        self._latest: dict[str, StoredGroup | None] = {}  # each group's stored state, as last seen
        self._written: dict[str, StoredGroup | None] = {}  # what this gateway wrote of it as its owner
        self._dirty: set[str] = set()
        self._woken = trio.Event()
        self._owned: set[int] = set()

    async def start(self, groups) -> None:
        """A cluster loads its groups slot by slot: the watch sees them all."""

    async def committed(self, group, offsets) -> None:
        """Written by the owner of the group's partition, from the watch."""

    async def deleted(self, group_id, partitions, *, whole_group: bool) -> None:
        """Written by the owner of the group's partition, from the watch."""

    def _changed(self, group_id: str, state: StoredGroup | None) -> None:
        self._latest[group_id] = state
        self._dirty.add(group_id)
        self._woken.set()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._changes.follow, self._changed)
            while True:
                with trio.move_on_after(self._check_interval_s):
                    await self._woken.wait()
                self._woken = trio.Event()
                with self._failures.guard(OFFSETS_TOPIC, "a pass"):
                    await self._pass()

    async def _pass(self) -> None:
        if OFFSETS_TOPIC not in self._logs.topics():
            if not any(state is not None for state in self._latest.values()):
                return  # no group yet: Kafka creates it at the first group's coordinator lookup
            await self._logs.create_internal_topic(OFFSETS_TOPIC, self.partitions, {"cleanup.policy": "compact"})
            return  # written once its partitions are owned
        owned = {p for p in range(self.partitions) if self._logs.ownership.owns(OFFSETS_TOPIC, p)}
        taken = owned - self._owned
        if taken:  # taken over (or first owned): what others wrote is not known here, all is written
            for group_id in self._latest:
                if offsets_partition(group_id, self.partitions) in taken:
                    self._written.pop(group_id, None)
                    self._dirty.add(group_id)
        self._owned = owned
        dirty, self._dirty = self._dirty, set()
        for group_id in dirty:
            if offsets_partition(group_id, self.partitions) not in owned:
                self._written.pop(group_id, None)
                continue
            latest, written = self._latest.get(group_id), self._written.get(group_id)
            records = _changes_between(group_id, written, latest, self._logs.clock.now_ms())
            await _append(self._logs, self._failures, self.partitions, group_id, records)
            self._written[group_id] = latest
            await trio.lowlevel.checkpoint()


def _changes_between(group_id: str, written: StoredGroup | None, latest: StoredGroup | None, now_ms: int
                     ) -> list[tuple[bytes | None, bytes | None]]:
    """The records that take a group's state in the topic from ``written`` to ``latest``."""
    before = written.offsets if written is not None else {}
    after = latest.offsets if latest is not None else {}
    records: list[tuple[bytes | None, bytes | None]] = []
    if latest is None:
        if written is not None:
            records.append((group_metadata_key(group_id), None))
    elif written is None or written.generation != latest.generation:
        records.append(_group_record(group_id, latest.protocol_type, latest.generation, None, None, [], now_ms))
    records += _offset_records(group_id, {key: value for key, value in after.items() if before.get(key) != value})
    records += [(offset_commit_key(group_id, topic, partition), None)
                for topic, partition in sorted(set(before) - set(after))]
    return records
