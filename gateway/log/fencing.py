"""Fencing other writers with seals, so no offset is ever claimed by two log objects.

Before a gateway loads a partition it did not hold, it puts a seal naming that
partition in the next free slot of every other writer that is not sealed
already (put-if-absent; if the slot is taken, the next one). A writer writes its
slots strictly in order and reads a slot it finds taken, so after the seal it
never writes that partition again — however late its PUTs arrive, whatever the
leases say. Only then does the gateway list the log objects and load the
partition: everything the former owner stored is in what it reads.

At start a gateway seals *all* of its node's earlier writers (alone, without a
cluster: every other writer), which fences a previous run still paused or
partitioned away. Seals taken together (a rebalance loads many partitions at
once) go out as one seal per writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import log_object_key, writer_node
from kafscale.protocol.log_object import encode_seal
from kafscale.storage_backends import ObjectExists

from ..clock import Clock
from ..ownership import Mode
from ..storage import AsyncStore
from .damage import DamageReport
from .log_objects import LogObjects, read_slot

__all__ = ["Fencer"]

log = logging.getLogger("kafscale.fencing")

Unit = tuple[str, int]


class Fencer:
    def __init__(self, store: AsyncStore, namespace: str, objects: LogObjects, own_writer: Callable[[], str],
                 live_nodes: Callable[[], set[int]], damage: DamageReport, *, mode: Mode,
                 clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._damage = damage
        self._namespace = namespace
        self._objects = objects
        self._own_writer = own_writer
        self._live_nodes = live_nodes
        # Alone, every other writer is a dead or stray run of this gateway.
        self._mode = mode
        self._wanted: set[Unit] = set()
        self._lock = trio.Lock()
        self.seals_written = 0

    async def seal_earlier_runs(self) -> None:
        """At start: seal all of this node's earlier writers (alone: every other writer)."""
        await self._objects.refresh()
        node = writer_node(self._own_writer())
        for writer in self._others():
            if self._mode is Mode.EMBEDDED or writer_node(writer) == node:
                await self._seal(writer, set(), seal_all=True)
        await self._objects.refresh()

    async def fence(self, unit: Unit) -> None:
        """Return once no other writer can store ``unit`` any more, and every log object it
        stored is known."""
        self._wanted.add(unit)
        async with self._lock:
            if unit not in self._wanted:
                return  # a round that started after it was wanted covered it
            units, self._wanted = self._wanted, set()
            await self._objects.refresh()
            live = self._live_nodes() if self._mode is Mode.CLUSTER else set()
            for writer in self._others():
                # A writer of a gateway that is gone is sealed for good.
                await self._seal(writer, units, seal_all=writer_node(writer) not in live)
            await self._objects.refresh()

    def _others(self) -> list[str]:
        others = []
        for writer, directories in self._objects.writers().items():
            if writer == self._own_writer() or any(d.seals_all for d in directories):
                continue
            others.append(writer)
        return others

    async def _seal(self, writer: str, units: set[Unit], *, seal_all: bool) -> None:
        sequence = self._objects.writers()[writer][-1].sequence + 1
        while True:
            key = log_object_key(self._namespace, writer, sequence)
            data, directory = encode_seal(key, sequence, self._clock.now_ms(), units, seal_all=seal_all)
            try:
                await self._store.put_if_absent(key, data)
            except ObjectExists:  # the writer got there first: seal the slot after
                try:
                    found = await read_slot(self._store, key)
                except SegmentFormatError as exc:
                    # Torn (its PUT never completed, so never acknowledged) or damaged since:
                    # the writer cannot go past it either; seal the slot after.
                    self._damage.record(key, f"log object unreadable, sealed after it: {exc}")
                    sequence += 1
                    continue
                if found is not None:
                    self._objects.add(found, 0)
                    if found.seals_all:
                        return
                sequence += 1
                continue
            self._objects.add(directory, len(data))
            self.seals_written += 1
            log.info("sealed %s at %d (%s)", writer, sequence,
                     "all partitions" if seal_all else f"{len(units)} partition(s)")
            return
