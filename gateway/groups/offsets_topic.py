"""``__consumer_offsets`` for readers: every group's commits and group metadata, in Kafka's
own schemas (:mod:`kafscale.protocol.group_records`), as an internal, compacted topic that
lag tools consume (Burrow, older lag exporters, mirror tooling).

The groups' state of record stays the group store; this topic mirrors it, written by the
coordinator after each commit is durable there: an append that fails is logged and
counted, never fails the commit. Created by the gateway (never by clients, who may only
read it) with Kafka's ``offsets.topic.num.partitions`` once there are groups (as Kafka
creates it at the first group's coordinator lookup); the state of the groups that exist
then is written into it once.

A lone gateway serves it (:class:`OffsetsTopic`). In a cluster a group's coordinator and
the owner of its ``__consumer_offsets`` partition are different gateways, so the topic is
not served there yet (:class:`NoOffsetsTopic`: Metadata answers it unknown).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

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

from ..maintenance import MaintenanceFailures
from .store import CommittedOffset

__all__ = ["OffsetsLog", "OffsetsTopic", "NoOffsetsTopic", "OFFSETS_TOPIC"]

log = logging.getLogger("kafscale.groups")


class GroupView(Protocol):
    """What is written of a group: its generation, protocol, members and offsets."""

    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    offsets: dict[tuple[str, int], CommittedOffset]

    def member_records(self) -> list[GroupMember]: ...


class OffsetsLog(Protocol):
    async def start(self, groups: Mapping[str, GroupView]) -> None: ...
    async def committed(self, group: GroupView, offsets: dict[tuple[str, int], CommittedOffset]) -> None: ...
    async def deleted(self, group_id: str, partitions: Iterable[tuple[str, int]], *, whole_group: bool) -> None: ...


class NoOffsetsTopic:
    """A cluster's gateways: the topic is not served (see the module's docstring)."""

    async def start(self, groups) -> None:
        """Nothing to create."""

    async def committed(self, group, offsets) -> None:
        """Nothing mirrored."""

    async def deleted(self, group_id, partitions, *, whole_group: bool) -> None:
        """Nothing mirrored."""


class TopicLogs(Protocol):
    """What the mirror needs of the log manager."""

    def topics(self) -> dict: ...
    async def get(self, topic: str, partition: int) -> Appendable: ...
    async def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> object: ...


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
            records.append((group_metadata_key(group.group_id), group_metadata_value(
                group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
                int(time.time() * 1000), group.member_records())))
        for (topic, partition), committed in sorted(offsets.items()):
            records.append((offset_commit_key(group.group_id, topic, partition), offset_commit_value(
                committed.offset, committed.leader_epoch, committed.metadata, committed.commit_ms)))
        await self._append(group.group_id, records)

    async def deleted(self, group_id: str, partitions: Iterable[tuple[str, int]], *, whole_group: bool) -> None:
        """Tombstones: the group's offsets of ``partitions`` (and the group itself) are gone."""
        if OFFSETS_TOPIC not in self._logs.topics():
            return  # nothing was written of it
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group_id, topic, partition), None) for topic, partition in sorted(partitions)]
        if whole_group:
            records.append((group_metadata_key(group_id), None))
            self._generations.pop(group_id, None)
        await self._append(group_id, records)

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        with self._failures.guard(OFFSETS_TOPIC, repr(group_id)):  # the commit stands whatever happens here
            partition_log = await self._logs.get(OFFSETS_TOPIC, offsets_partition(group_id, self.partitions))
            batch = bytearray(build_batch(records, base_timestamp=int(time.time() * 1000)))
            partition_log.append(batch, split_batches(batch))
