"""A cluster gateway's identity: its node id, held under an etcd lease.

``brokers/{id}`` is created under the gateway's lease, only where no key is, so no two
live gateways ever hold one id; a dead gateway's id is free again once its lease
ends, and the next gateway to claim one gets the lowest free id. Nothing else about
a gateway is its own: pods of a Deployment start with no id and take one here.

The id is claimed before anything is stored under it: at start a gateway seals the
log writers of earlier holders of its id (gateway/log/fencing.py), which is safe only
once their lease is over. The lease is kept alive from the claim until the gateway
has stopped (:func:`held_node`); a gateway cut off past its lease claims its own id
again, and stops if another gateway took it meanwhile (an orchestrator starts it
again, with a new id).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import trio

from ..etcd import Compare, EtcdClient, EtcdError, put_op, range_op
from ..ownership import Broker, Endpoint

__all__ = ["NodeLease", "NodeIdTaken", "held_node", "LEASE_SAFETY_S"]

log = logging.getLogger("kafscale.cluster")

# How much earlier than etcd we consider our own lease gone (clock rates, request time).
LEASE_SAFETY_S = 1.0
BROKERS = "brokers/"
# An auto id is the lowest free one below this (Kafka's reserved.broker.max.id is 1000).
AUTO_ID_LIMIT = 1000


class NodeIdTaken(RuntimeError):
    """The node id is held by a live gateway; the message names it."""


def broker_record(broker: Broker, *, draining: bool = False) -> bytes:
    """The ``brokers/{id}`` value: where clients reach the gateway, and whether it is
    handing everything over before it stops."""
    return json.dumps({"host": broker.host, "port": broker.port, "draining": draining,
                       "listeners": [list(endpoint) for endpoint in broker.endpoints]}).encode()


class NodeLease:
    """The node id this gateway holds and the etcd lease it holds it under."""

    def __init__(self, etcd: EtcdClient, root: str, ttl_s: int, requested: int | Literal["auto"],
                 host: str, port: int, endpoints: tuple[Endpoint, ...]) -> None:
        self._etcd = etcd
        self._prefix = root + BROKERS
        self.ttl_s = ttl_s
        self.requested = requested
        self._host, self._port, self._endpoints = host, port, endpoints  # where clients reach this gateway
        self.node_id = -1  # set by claim(), before anything reads it (held_node)
        self.lease = 0
        self.deadline = 0.0
        self.draining = False
        self.claims = 0  # how often an id was claimed (1 + re-joins after losing the lease)

    @property
    def broker(self) -> Broker:
        return self._as(self.node_id)

    def _as(self, node_id: int) -> Broker:
        return Broker(node_id, self._host, self._port, self._endpoints)

    def valid(self) -> bool:
        return trio.current_time() < self.deadline

    async def claim(self, wait_s: float) -> None:
        """Take the requested id (or, for ``auto``, the lowest free one) under a new lease.
        A given id that a gateway which just died still holds is waited for, at most
        ``wait_s``; then :class:`NodeIdTaken`."""
        await self._claim(self.requested, wait_s)

    async def _claim(self, wanted: int | Literal["auto"], wait_s: float) -> None:
        deadline = trio.current_time() + wait_s
        while True:
            sent = trio.current_time()
            lease = await self._etcd.lease_grant(self.ttl_s)
            candidates = [wanted] if wanted != "auto" else await self._free_ids()
            for node_id in candidates:
                key = f"{self._prefix}{node_id}"
                value = broker_record(self._as(node_id), draining=self.draining)
                created, responses = await self._etcd.txn([Compare(key, "CREATE", 0)], [put_op(key, value, lease)],
                                                          [range_op(key)])
                if created:
                    self.node_id, self.lease, self.deadline = node_id, lease, sent + self.ttl_s - LEASE_SAFETY_S
                    self.claims += 1
                    log.info("joined the cluster as node %d (%s:%d), lease %x, ttl %d s",
                             node_id, self._host, self._port, lease, self.ttl_s)
                    return
            await self._etcd.lease_revoke(lease)
            if wanted == "auto":
                await trio.sleep(0.1)  # other gateways took those ids at the same moment: look again
                continue
            holder = responses[0][0].value.decode() if responses and responses[0] else "?"
            if trio.current_time() > deadline:
                raise NodeIdTaken(f"node id {wanted} is taken by a live gateway ({holder})")
            log.warning("node id %s is still registered (%s); waiting for that lease to end", wanted, holder)
            await trio.sleep(1.0)

    async def _free_ids(self) -> list[int]:
        """The lowest ids no live gateway holds, a few (others may be claiming at once)."""
        held = {int(kv.key.rsplit("/", 1)[1]) for kv in await self._etcd.get_prefix(self._prefix)}
        free = [node_id for node_id in range(AUTO_ID_LIMIT) if node_id not in held][:4]
        if not free:
            raise NodeIdTaken(f"all {AUTO_ID_LIMIT} node ids are held by live gateways")
        return free

    async def announce_draining(self) -> None:
        """Tell the other gateways this one hands everything over (they then place nothing on it)."""
        self.draining = True
        key = f"{self._prefix}{self.node_id}"
        await self._etcd.txn([Compare(key, "LEASE", self.lease)],
                             [put_op(key, broker_record(self.broker, draining=True), self.lease)])

    async def keep(self) -> None:
        """Keep the lease alive; after losing it, hold the same id again under a new one.
        Raises :class:`NodeIdTaken` when an auto id was taken by another gateway meanwhile."""
        failing = False
        while True:
            await trio.sleep(self.ttl_s / 3)
            sent = trio.current_time()
            try:
                ttl = await self._etcd.lease_keepalive(self.lease)
                if ttl <= 0:
                    await self._rejoin()
                else:
                    self.deadline = sent + ttl - LEASE_SAFETY_S
                if failing:
                    log.info("etcd reachable again")
                failing = False
            except NodeIdTaken:
                raise
            except Exception as exc:  # etcd failing, or (a bug) anything else: the loop goes on
                if not failing:
                    log.warning("lease keepalive failed (writes stop in %.1f s unless etcd answers): %s",
                                max(0.0, self.deadline - trio.current_time()), exc,
                                exc_info=None if isinstance(exc, EtcdError) else exc)
                failing = True

    async def _rejoin(self) -> None:
        log.warning("lease %x is gone (paused or cut off for longer than %d s): everything it owned has moved; "
                    "joining again as node %d", self.lease, self.ttl_s, self.node_id)
        self.deadline = 0.0
        try:
            await self._claim(self.node_id, wait_s=self.ttl_s + 2)  # its own id: everything was built on it
        except NodeIdTaken:
            if self.requested != "auto":
                raise EtcdError(f"node id {self.node_id} is still held by another gateway") from None
            raise NodeIdTaken(f"node id {self.node_id} was taken by another gateway while this one was cut off "
                              "from etcd; it stops, to be started again with a new id") from None

    async def revoke(self) -> None:
        """Graceful stop: revoking the lease frees every key held under it at once."""
        self.deadline = 0.0
        with trio.move_on_after(3):
            try:
                await self._etcd.lease_revoke(self.lease)
            except EtcdError as exc:
                log.warning("could not revoke lease (it expires by itself): %s", exc)


@asynccontextmanager
async def held_node(lease: NodeLease, wait_s: float) -> AsyncIterator[NodeLease]:
    """Claim the node id, keep its lease alive for the body, revoke it after."""
    await lease.claim(wait_s)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lease.keep)
            yield lease
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await lease.revoke()
