"""What this gateway of a cluster should own, and its local state kept in line with it.

On every change of the cluster view, and every ``cluster_refresh_ms``, the
rebalancer computes the owner each unit (partition or group slot) should have
(:mod:`.placement`, over the gateways that are not draining), gives up what should move (flush, then the member deletes its
owner key) and claims what is free and meant for it; then it closes the logs and
drops the group slots this gateway no longer owns, and loads the group slots it
now owns (partition logs load on first use).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

from kafscale.protocol.errors import KafkaError

from ..etcd import EtcdError
from ..groups import GroupCoordinator
from ..log import LogManager
from ..metadata import TopicInfo
from ..ownership import GROUP_UNIT
from .membership import ClusterMember
from .placement import Placement
from .view import Owner

__all__ = ["Rebalancer", "MOVES_IN_FLIGHT"]

log = logging.getLogger("kafscale.cluster")

# Ownership changes (etcd transactions, log closes) in flight at once.
MOVES_IN_FLIGHT = 16

Unit = tuple[str, int]
Item = TypeVar("Item")


class Rebalancer:
    def __init__(self, member: ClusterMember, logs: LogManager, groups: GroupCoordinator, refresh_s: float) -> None:
        self._member = member
        self._logs = logs
        self._groups = groups
        self._refresh_s = refresh_s
        self._known_topics: dict[str, TopicInfo] = {}
        self._placement: Placement | None = None
        self._desired_for: tuple[tuple[int, ...], dict[str, TopicInfo], dict[Unit, int]] | None = None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        failing = False
        while True:
            await self._member.wait_for_change(self._refresh_s)
            try:
                await self.reconcile()
                failing = False
            except EtcdError as exc:
                if not failing:
                    log.warning("cannot read the cluster state from etcd: %s", exc)
                failing = True
                await self._sync_local()  # stops what the lease no longer covers
            except Exception:
                log.exception("cluster reconcile failed")

    async def reconcile(self) -> None:
        """One round on the current view: follow topic changes, give up and claim units,
        align local state. Reads nothing from etcd; writes only what moves."""
        member = self._member
        topics = self._logs.topics()
        await self._follow_topic_changes(self._known_topics, topics)
        self._known_topics = topics
        owners = dict(member.view.owners)
        # Units are placed on the gateways that are not draining (this one's own flag counts
        # at once, before etcd's watch brings it back).
        live = tuple(sorted(node for node, broker in member.view.brokers.items()
                            if not broker.draining and not (node == member.node_id and member.draining)))
        if member.lease_valid() and member.node_id in member.view.brokers and live:
            desired = await self._desired(live, topics)
            giving_up = [(unit, owner) for unit, owner in sorted(owners.items())
                         if member.holds(owner) and desired.get(unit) != member.node_id]
            if giving_up:
                await self._release(giving_up)
            if member.may_claim():
                claiming = [unit for unit, node in sorted(desired.items())
                            if node == member.node_id and unit not in owners]
                await self._each(member.claim, claiming)
        await self._sync_local()

    async def _each(self, operation: Callable[[Item], Awaitable[None]], items: Iterable[Item]) -> None:
        """Run ``operation`` on every item, a bounded number at a time (a join or leave can move
        many units at once); one failing is logged and retried on the next round."""
        limiter = trio.CapacityLimiter(MOVES_IN_FLIGHT)

        async def one(item: Item) -> None:
            async with limiter:
                try:
                    await operation(item)
                except Exception as exc:  # one item failing holds up no other; the next round retries it
                    log.warning("%s %s failed (retried on the next round): %s", operation.__name__, item, exc,
                                exc_info=None if isinstance(exc, EtcdError) else exc)

        async with trio.open_nursery() as nursery:
            for item in items:
                nursery.start_soon(one, item)

    async def _desired(self, live: tuple[int, ...], topics: dict[str, TopicInfo]) -> dict[Unit, int]:
        """Every unit's owner under the placement of ``live``; computed again only when the
        gateways or the topics change (it is O(partitions)), yielding as it goes."""
        if self._desired_for is not None and self._desired_for[0] == live and self._desired_for[1] is topics:
            return self._desired_for[2]
        placement = self._placement_for(live)
        slots = self._member.slots
        desired = {(GROUP_UNIT, slot): node for slot, node in enumerate(placement.topic(GROUP_UNIT, slots))}
        for name, info in topics.items():
            await trio.lowlevel.checkpoint()
            desired.update(((name, p), node) for p, node in enumerate(placement.topic(name, info.partitions)))
        self._desired_for = (live, topics, desired)
        return desired

    def _placement_for(self, live: tuple[int, ...]) -> Placement:
        if self._placement is None or tuple(self._placement.brokers) != live:
            self._placement = Placement(list(live))
        return self._placement

    async def _follow_topic_changes(self, before: dict[str, TopicInfo], after: dict[str, TopicInfo]) -> None:
        """Changes made through another gateway: configs reach the loaded logs, and the
        groups this gateway coordinates drop the offsets of deleted topics."""
        for name, info in after.items():
            previous = before.get(name)
            if previous is not None and previous.configs != info.configs:
                self._logs.apply_topic_settings(info)
        for name in before.keys() - after.keys():
            await self._groups.forget_topic(name)

    async def _release(self, units: list[tuple[Unit, Owner]]) -> None:
        # Out of the local view first, so no request reloads a log while it closes; then
        # flush and close them all; then delete the owner keys, which lets the next owners in.
        for unit, _ in units:
            self._member.forget(unit)
        await self._sync_local()
        await self._each(self._member.hand_over, units)

    async def _sync_local(self) -> None:
        """Close the logs and forget the groups this gateway no longer owns; load groups of
        slots it now owns (partition logs load on first use)."""
        member = self._member
        stale = [each for each in self._logs.loaded() if not member.owns(each.topic, each.partition)]
        async with trio.open_nursery() as nursery:  # each flushes what it accepted
            for partition_log in stale:
                nursery.start_soon(self._logs.release, partition_log.topic, partition_log.partition)
        held = self._groups.owned_slots()
        for slot in range(member.slots):
            owned = member.owns(GROUP_UNIT, slot)
            if owned and slot not in held:
                try:
                    await self._groups.adopt_slot(slot)
                except (KafkaError, EtcdError) as exc:
                    log.warning("loading groups of slot %d failed (retried): %s", slot, exc)
            elif not owned and slot in held:
                self._groups.drop_slot(slot)
