"""What one gateway does to finish a prepared transaction: the markers of the partitions
it owns, the pending offsets of the groups it coordinates.

A partition's marker is written by its owner only (the one gateway that appends to it),
and only if the producer's transaction is open there (:meth:`TransactionBook.write_marker`),
so however often a transaction is finished, by whichever gateways, each partition gets
one marker. Partitions of a deleted topic need none.
"""

from __future__ import annotations

import logging

import trio

from kafscale.protocol.errors import KafkaError
from kafscale.protocol.transactions import Transaction, TxnState

from ..groups import GroupCoordinator
from ..groups.store import CommittedOffset
from ..log import LogManager

__all__ = ["GatewayMarkers"]

log = logging.getLogger("kafscale.transactions")


class GatewayMarkers:
    def __init__(self, logs: LogManager, groups: GroupCoordinator, node_id: int) -> None:
        self._logs = logs
        self._groups = groups
        self._node_id = node_id
        self.markers_written = 0

    async def abort_orphans(self, live_producers: set[int], older_than_s: float) -> int:
        """Abort, in the partitions this gateway owns, transactions open longer than
        ``older_than_s`` whose producer has no unfinished transaction at the coordinator
        (its record lost or restored from an older backup): so no last stable offset stalls
        forever. Returns the markers written."""
        now = trio.current_time()
        written = 0
        for partition_log in self._logs.loaded():
            if not partition_log.writable():
                continue
            for producer_id, since in partition_log.transactions_open_since().items():
                if producer_id in live_producers or now - since < older_than_s:
                    continue
                log.warning("%s-%d: producer %d's transaction has been open %.0f s with no unfinished transaction "
                            "at the coordinator: aborted", partition_log.topic, partition_log.partition,
                            producer_id, now - since)
                try:
                    written += await partition_log.write_marker(producer_id, 0, commit=False)
                except KafkaError as exc:
                    log.info("aborting producer %d's transaction on %s-%d failed: %s", producer_id,
                             partition_log.topic, partition_log.partition, exc)
        self.markers_written += written
        return written

    def coordinates(self, transactional_id: str) -> bool:
        broker = self._logs.ownership.coordinator(transactional_id)
        return broker is not None and broker.node_id == self._node_id

    async def finish(self, transaction: Transaction) -> tuple[set[tuple[str, int]], set[str]]:
        commit = transaction.state == TxnState.PREPARE_COMMIT
        partitions: set[tuple[str, int]] = set()
        mine: list[tuple[str, int]] = []
        for topic, partition in sorted(transaction.partitions - transaction.partitions_done):
            info = self._logs.topics().get(topic)
            if info is None or partition >= info.partitions:
                partitions.add((topic, partition))  # deleted with its data: nothing to mark
            elif self._logs.ownership.owns(topic, partition):
                mine.append((topic, partition))

        async def mark(topic: str, partition: int) -> None:
            try:
                partition_log = await self._logs.get(topic, partition)
                if await partition_log.write_marker(transaction.producer_id, transaction.producer_epoch, commit):
                    self.markers_written += 1
            except KafkaError as exc:  # moving, or the store failing: the next sweep tries again
                log.info("marker of %r on %s-%d not written yet: %s", transaction.transactional_id, topic,
                         partition, exc)
                return
            partitions.add((topic, partition))

        async with trio.open_nursery() as nursery:  # the markers share one log object
            for topic, partition in mine:
                nursery.start_soon(mark, topic, partition)
        groups: set[str] = set()
        for group_id in sorted(transaction.group_ids - transaction.groups_done):
            try:
                self._groups.check_coordinator(group_id)
            except KafkaError:
                continue  # its coordinator applies them
            if commit:
                await self._groups.commit_transactional(group_id, {
                    (o.topic, o.partition): CommittedOffset(o.offset, o.leader_epoch, o.metadata,
                                                            transaction.updated_ms)
                    for o in transaction.offsets if o.group_id == group_id})
            groups.add(group_id)
        return partitions, groups
