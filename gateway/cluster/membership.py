"""A gateway in a cluster: the partitions and group slots it owns.

etcd keys under the cluster root (all but ``epochs/`` die with the owner's lease):

    brokers/{node id}       {"host", "port", "draining"}: a live gateway (:mod:`.node_lease`)
    owners/{topic}/{p}      {"node", "epoch"}: the gateway leading partition p
    owners/~groups/{slot}   the same for a group-coordinator slot
    epochs/{topic}/{p}      the last leader epoch handed out (never decreases)
    coordinator_slots       fixed slot count of the cluster

Each gateway keeps brokers, owners and topics in memory from etcd watches (one
read, then only changes), and answers the :class:`~..ownership.Ownership`
questions from them. The :mod:`.rebalance` decides what moves; this module does,
under the lease of the gateway's node id, the etcd side of a move: handing a unit over (deleting its
owner key) and claiming one (a transaction that creates the owner key under the
lease and bumps the epoch).

Safety does not depend on timing: ownership only routes traffic. What a former
owner can store is decided by seals in its log-object slots (gateway/log/fencing.py,
docs/formats.md "Commit and fencing"), and a partition log writes only under the
leader epoch it was loaded under.
"""

from __future__ import annotations

import json
import logging

import trio

from ..config import GatewayConfig
from ..etcd import Compare, EtcdClient, EtcdError, delete_op, put_op, range_op
from ..groups.store import slot_of
from ..metadata import EtcdMetadataStore
from ..ownership import GROUP_UNIT, Broker, Mode, group_unit
from .node_lease import NodeLease
from .view import ClusterView, FollowedPart, Owner

__all__ = ["ClusterMember", "ClusterStartError"]

log = logging.getLogger("kafscale.cluster")


class ClusterStartError(RuntimeError):
    """The gateway cannot join the cluster; the message says why."""


def _unit_key(unit: tuple[str, int]) -> str:
    return f"{unit[0]}/{unit[1]}"


class ClusterMember:
    mode = Mode.CLUSTER

    def __init__(self, config: GatewayConfig, etcd: EtcdClient, metadata: EtcdMetadataStore,
                 followed: dict[str, FollowedPart], root: str, node: NodeLease) -> None:
        self.node = node
        self.node_id = node.node_id
        self.me = node.broker
        self._etcd = etcd
        self._root = root
        self._refresh_s = config.cluster.cluster_refresh_ms / 1000
        self.slots = config.cluster.coordinator_slots
        self._wakeup = trio.Event()
        self.view = ClusterView(etcd, root, metadata, followed, on_change=self._wakeup_now,
                                retry_s=min(1.0, self._refresh_s))
        self.acquired = 0
        self.released = 0

    # -- the questions handlers ask (Ownership) ------------------------------------------

    def lease_valid(self) -> bool:
        return self.node.valid()

    def brokers(self) -> list[Broker]:
        return [self.view.brokers[n] for n in sorted(self.view.brokers)] or [self.me]

    def controller_id(self) -> int:
        return min(self.view.brokers, default=self.node_id)

    def leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        owner = self.view.owners.get((topic, partition))
        if owner is None or owner.node_id not in self.view.brokers:
            return None
        return owner.node_id, owner.epoch

    def owns(self, topic: str, partition: int) -> bool:
        owner = self.view.owners.get((topic, partition))
        return owner is not None and self.holds(owner) and self.lease_valid()

    def owned_count(self) -> int:
        return sum(1 for (topic, p) in self.view.owners if topic != GROUP_UNIT and self.owns(topic, p))

    def held_units(self) -> int:
        """Partitions and group slots this gateway holds in etcd (draining waits for none)."""
        return sum(1 for owner in self.view.owners.values() if self.holds(owner))

    def coordinator(self, group_id: str) -> Broker | None:
        owner = self.view.owners.get(group_unit(slot_of(group_id, self.slots)))
        return None if owner is None else self.view.brokers.get(owner.node_id)

    # -- joining and leaving -------------------------------------------------------------

    async def join(self) -> None:
        """Check the cluster's fixed settings and read the cluster's state (the node id is
        already held: :mod:`.node_lease`)."""
        try:
            await self._check_slot_count()
            await self.view.read_all()
        except EtcdError as exc:
            raise ClusterStartError(f"etcd at {', '.join(self._etcd.endpoints)}: {exc}") from exc

    async def _check_slot_count(self) -> None:
        key = self._root + "coordinator_slots"
        _, responses = await self._etcd.txn([Compare(key, "CREATE", 0)], [put_op(key, str(self.slots).encode())],
                                            [range_op(key)])
        if responses and isinstance(responses[0], list) and responses[0]:
            existing = int(responses[0][0].value)
            if existing != self.slots:
                raise ClusterStartError(f"coordinator_slots is {self.slots} but the cluster uses {existing}")

    async def drain(self) -> None:
        """Stop taking units and let the rebalancer hand every one over (the other gateways
        place nothing on a draining one)."""
        await self.node.announce_draining()
        self._wakeup_now()

    @property
    def draining(self) -> bool:
        return self.node.draining

    # -- the loops -------------------------------------------------------------------------

    def _wakeup_now(self) -> None:
        self._wakeup.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Follow etcd (the rebalancer acts on what changes); the lease is kept by its holder."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.view.run)
            task_status.started()

    async def wait_for_change(self, timeout_s: float) -> None:
        """Return when the view changed, or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            await self._wakeup.wait()
        self._wakeup = trio.Event()

    def may_claim(self) -> bool:
        """Whether this gateway may hand over and claim units now (registered, lease valid)."""
        return self.lease_valid() and self.node_id in self.view.brokers and not self.draining

    def holds(self, owner: Owner) -> bool:
        """Whether ``owner`` (an entry of the view) is this gateway under its current lease."""
        return owner.node_id == self.node_id and owner.lease == self.node.lease

    def forget(self, unit: tuple[str, int]) -> None:
        """Out of the local view before it is handed over, so no request loads it meanwhile."""
        self.view.owners.pop(unit, None)

    async def claim(self, unit: tuple[str, int]) -> None:
        """Own the unit if nobody does: its owner key under this lease, its epoch one higher."""
        owner_key = self._root + "owners/" + _unit_key(unit)
        epoch_key = self._root + "epochs/" + _unit_key(unit)
        current = await self._etcd.get(epoch_key)
        epoch = int(current.value) + 1 if current else 0
        guards = [Compare(owner_key, "CREATE", 0),
                  Compare(epoch_key, "MOD", current.mod_revision) if current else Compare(epoch_key, "CREATE", 0)]
        owner = json.dumps({"node": self.node_id, "epoch": epoch}).encode()
        won, _ = await self._etcd.txn(guards, [put_op(owner_key, owner, self.node.lease),
                                               put_op(epoch_key, str(epoch).encode())])
        if won:
            self.view.owners[unit] = Owner(self.node_id, epoch, self.node.lease)
            self.acquired += 1
            log.info("took %s at epoch %d", _unit_key(unit), epoch)

    async def hand_over(self, item: tuple[tuple[str, int], Owner]) -> None:
        """Delete this gateway's owner key of the unit, which lets the next owner in."""
        unit, owner = item
        key = self._root + "owners/" + _unit_key(unit)
        try:
            await self._etcd.txn([Compare(key, "LEASE", self.node.lease)], [delete_op(key)])
        except EtcdError:
            self.view.owners.setdefault(unit, owner)  # still ours in etcd: hand it over next round
            raise
        self.released += 1
        log.info("handed over %s", _unit_key(unit))
