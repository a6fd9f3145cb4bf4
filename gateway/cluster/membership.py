"""A gateway in a cluster: its lease in etcd, and the partitions and group slots it owns.

etcd keys under the cluster root (all but ``epochs/`` die with the owner's lease):

    brokers/{node id}       {"host", "port"}: a live gateway
    owners/{topic}/{p}      {"node", "epoch"}: the gateway leading partition p
    owners/~groups/{slot}   the same for a group-coordinator slot
    epochs/{topic}/{p}      the last leader epoch handed out (never decreases)
    coordinator_slots       fixed slot count of the cluster

Each gateway keeps brokers, owners and topics in memory from etcd watches (one
read, then only changes), and answers the :class:`~..ownership.Ownership`
questions from them. The :mod:`.rebalance` decides what moves; this module holds
the lease and does the etcd side of a move: handing a unit over (deleting its
owner key) and claiming one (a transaction that creates the owner key under the
lease and bumps the epoch).

Safety does not depend on timing: ownership only routes traffic. What a former
owner can store is decided by seals in its log-object slots (gateway/fencing.py,
docs/formats.md "Commit and fencing"), and a partition log writes only under the
leader epoch it was loaded under.
"""

from __future__ import annotations

import json
import logging

import trio

from ..config import GatewayConfig
from ..groups.store import slot_of
from ..ownership import GROUP_UNIT, Broker, Endpoint, group_unit
from .etcd import Compare, EtcdClient, EtcdError, delete_op, put_op, range_op
from .etcd_metadata import EtcdMetadata
from .view import ClusterView, FollowedPart, Owner

__all__ = ["ClusterMember", "ClusterStartError"]

log = logging.getLogger("kafscale.cluster")

# How much earlier than etcd we consider our own lease gone (clock rates, request time).
LEASE_SAFETY_S = 1.0


class ClusterStartError(RuntimeError):
    """The gateway cannot join the cluster; the message says why."""


def _unit_key(unit: tuple[str, int]) -> str:
    return f"{unit[0]}/{unit[1]}"


class ClusterMember:
    clustered = True

    def __init__(self, config: GatewayConfig, etcd: EtcdClient, metadata: EtcdMetadata, security: FollowedPart,
                 root: str, endpoints: tuple[Endpoint, ...]) -> None:
        self.node_id = config.network.node_id
        host, port = config.network.advertised
        self.me = Broker(config.network.node_id, host, port, endpoints)
        self._etcd = etcd
        self._root = root
        self._ttl_s = max(2, -(-config.cluster.lease_ttl_ms // 1000))
        self._refresh_s = config.cluster.cluster_refresh_ms / 1000
        self.slots = config.cluster.coordinator_slots
        self._lease = 0
        self._lease_deadline = 0.0
        self._wakeup = trio.Event()
        self.view = ClusterView(etcd, root, metadata, security, on_change=self._wakeup_now,
                                retry_s=min(1.0, self._refresh_s))
        self.acquired = 0
        self.released = 0

    # -- the questions handlers ask (Ownership) ------------------------------------------

    def lease_valid(self) -> bool:
        return trio.current_time() < self._lease_deadline

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
        return (owner is not None and owner.node_id == self.node_id and owner.lease == self._lease
                and self.lease_valid())

    def owned_count(self) -> int:
        return sum(1 for (topic, p) in self.view.owners if topic != GROUP_UNIT and self.owns(topic, p))

    def coordinator(self, group_id: str) -> Broker | None:
        owner = self.view.owners.get(group_unit(slot_of(group_id, self.slots)))
        return None if owner is None else self.view.brokers.get(owner.node_id)

    # -- joining and leaving -------------------------------------------------------------

    async def join(self) -> None:
        """Check the cluster's fixed settings, register this gateway and read the cluster's state."""
        try:
            await self._check_slot_count()
            await self._register(wait_s=self._ttl_s + 2)
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

    async def _register(self, wait_s: float) -> None:
        """A new lease, then this gateway's broker key under it. The node id of a gateway that
        just died stays taken until its lease runs out: wait that long, then give up."""
        key = f"{self._root}brokers/{self.node_id}"
        value = json.dumps({"host": self.me.host, "port": self.me.port,
                            "listeners": [list(endpoint) for endpoint in self.me.endpoints]}).encode()
        deadline = trio.current_time() + wait_s
        while True:
            sent = trio.current_time()
            lease = await self._etcd.lease_grant(self._ttl_s)
            created, responses = await self._etcd.txn([Compare(key, "CREATE", 0)], [put_op(key, value, lease)],
                                                      [range_op(key)])
            if created:
                self._lease, self._lease_deadline = lease, sent + self._ttl_s - LEASE_SAFETY_S
                log.info("joined the cluster as node %d (%s:%d), lease %x, ttl %d s",
                         self.node_id, self.me.host, self.me.port, lease, self._ttl_s)
                return
            await self._etcd.lease_revoke(lease)
            holder = responses[0][0].value.decode() if responses and responses[0] else "?"
            if trio.current_time() > deadline:
                raise ClusterStartError(f"node id {self.node_id} is taken by a live gateway ({holder})")
            log.warning("node id %d is still registered (%s); waiting for that lease to end", self.node_id, holder)
            await trio.sleep(1.0)

    async def leave(self) -> None:
        """Graceful stop (after the logs were flushed): revoking the lease frees every key at once."""
        self._lease_deadline = 0.0
        with trio.move_on_after(3):
            try:
                await self._etcd.lease_revoke(self._lease)
            except EtcdError as exc:
                log.warning("could not revoke lease (it expires by itself): %s", exc)

    # -- the loops -------------------------------------------------------------------------

    def _wakeup_now(self) -> None:
        self._wakeup.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the lease and follow etcd (the rebalancer acts on what changes)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.view.run)
            task_status.started()
            await self._keepalive_loop()

    async def _keepalive_loop(self) -> None:
        failing = False
        while True:
            await trio.sleep(self._ttl_s / 3)
            sent = trio.current_time()
            try:
                ttl = await self._etcd.lease_keepalive(self._lease)
                if ttl <= 0:
                    log.warning("lease %x is gone (paused or cut off for longer than %d s): "
                                "everything it owned has moved; joining again", self._lease, self._ttl_s)
                    self._lease_deadline = 0.0
                    await self._register(wait_s=self._ttl_s + 2)
                    self._wakeup_now()
                else:
                    self._lease_deadline = sent + ttl - LEASE_SAFETY_S
                if failing:
                    log.info("etcd reachable again")
                failing = False
            except Exception as exc:  # etcd failing, or (a bug) anything else: the loop goes on
                if not failing:
                    log.warning("lease keepalive failed (writes stop in %.1f s unless etcd answers): %s",
                                max(0.0, self._lease_deadline - trio.current_time()), exc,
                                exc_info=None if isinstance(exc, (EtcdError, ClusterStartError)) else exc)
                failing = True

    async def wait_for_change(self, timeout_s: float) -> None:
        """Return when the view changed or this gateway joined again, or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            await self._wakeup.wait()
        self._wakeup = trio.Event()

    def may_claim(self) -> bool:
        """Whether this gateway may hand over and claim units now (registered, lease valid)."""
        return self.lease_valid() and self.node_id in self.view.brokers

    def holds(self, owner: Owner) -> bool:
        """Whether ``owner`` (an entry of the view) is this gateway under its current lease."""
        return owner.node_id == self.node_id and owner.lease == self._lease

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
        won, _ = await self._etcd.txn(guards, [put_op(owner_key, owner, self._lease),
                                               put_op(epoch_key, str(epoch).encode())])
        if won:
            self.view.owners[unit] = Owner(self.node_id, epoch, self._lease)
            self.acquired += 1
            log.info("took %s at epoch %d", _unit_key(unit), epoch)

    async def hand_over(self, item: tuple[tuple[str, int], Owner]) -> None:
        """Delete this gateway's owner key of the unit, which lets the next owner in."""
        unit, owner = item
        key = self._root + "owners/" + _unit_key(unit)
        try:
            await self._etcd.txn([Compare(key, "LEASE", self._lease)], [delete_op(key)])
        except EtcdError:
            self.view.owners.setdefault(unit, owner)  # still ours in etcd: hand it over next round
            raise
        self.released += 1
        log.info("handed over %s", _unit_key(unit))
