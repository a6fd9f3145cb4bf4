"""The shared log objects a gateway knows: their directories, by writer and by partition.

Directories are immutable, so each is read once (one ranged GET of the object's
tail, rarely two) and kept; :meth:`LogObjects.refresh` lists ``~log/`` and reads
only the new ones. The gateway's own objects are added as they are written.
"""

from __future__ import annotations

from collections import defaultdict

import trio

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import log_prefix, parse_log_object_key
from kafscale.protocol.log_object import (
    LogEntry,
    LogObjectDirectory,
    directory_from_tail,
    parse_directory,
    tail_start,
)
from kafscale.protocol.log_view import entries_by_partition
from kafscale.storage_backends import ObjectNotFound

from .damage import DamageReport
from .storage import AsyncStore

__all__ = ["LogObjects", "read_log_directory", "read_slot"]

_READS_IN_FLIGHT = 16


async def read_log_directory(store: AsyncStore, key: str, size: int) -> LogObjectDirectory:
    """A log object's directory, from one ranged GET of its tail (two if the directory is
    larger than that read); :class:`SegmentFormatError` if the object is torn."""
    found = directory_from_tail(key, size, await store.get_range(key, tail_start(size), size))
    if isinstance(found, int):
        return parse_directory(key, await store.get_range(key, found, size))
    return found


async def read_slot(store: AsyncStore, key: str) -> LogObjectDirectory | None:
    """The directory of whatever took a slot (a put-if-absent lost), ``None`` if it is gone."""
    info = await store.head(key)
    return None if info is None else await read_log_directory(store, key, info.size)


class LogObjects:
    def __init__(self, store: AsyncStore, namespace: str, damage: DamageReport) -> None:
        self._store = store
        self._damage = damage
        self._prefix = log_prefix(namespace)
        self.directories: dict[str, LogObjectDirectory] = {}
        self.sizes: dict[str, int] = {}
        self.unreadable: set[str] = set()
        self._by_partition: dict[tuple[str, int], list[LogEntry]] | None = None
        self._refreshing = trio.Lock()

    def add(self, directory: LogObjectDirectory, size: int) -> None:
        self.directories[directory.key] = directory
        self.sizes[directory.key] = size
        self._by_partition = None

    def forget(self, key: str) -> None:
        if self.directories.pop(key, None) is not None:
            self._by_partition = None
        self.sizes.pop(key, None)

    async def refresh(self) -> None:
        """List the log objects and read the directories not seen yet; objects deleted by
        others are forgotten."""
        async with self._refreshing:
            listed = {info.key: info.size for info in await self._store.list(self._prefix)
                      if parse_log_object_key(info.key) is not None}
            for key in list(self.directories):
                if key not in listed:
                    self.forget(key)
            new = [(key, size) for key, size in listed.items()
                   if key not in self.directories and key not in self.unreadable]
            limiter = trio.CapacityLimiter(_READS_IN_FLIGHT)

            async def read(key: str, size: int) -> None:
                async with limiter:
                    try:
                        self.add(await read_log_directory(self._store, key, size), size)
                    except ObjectNotFound:
                        pass  # deleted since the listing
                    except SegmentFormatError as exc:
                        # Torn (never acknowledged: acks wait for the whole write) or damaged since:
                        # ignored, kept for inspection. Offsets it held that no other piece holds
                        # answer CORRUPT_MESSAGE (PartitionLog.read).
                        self._damage.record(key, f"log object unreadable, ignored: {exc}")
                        self.unreadable.add(key)

            async with trio.open_nursery() as nursery:
                for key, size in new:
                    nursery.start_soon(read, key, size)

    def entries_for(self, topic: str, partition: int, topic_id: bytes | None = None) -> list[LogEntry]:
        """The partition's valid entries (of this incarnation of the topic, given its id)."""
        if self._by_partition is None:
            self._by_partition = entries_by_partition(self.directories.values())
        return [entry for entry in self._by_partition.get((topic, partition), ())
                if topic_id is None or entry.topic_id == topic_id]

    def writers(self) -> dict[str, list[LogObjectDirectory]]:
        """Each writer's known objects, in sequence order."""
        found: dict[str, list[LogObjectDirectory]] = defaultdict(list)
        for directory in self.directories.values():
            parsed = parse_log_object_key(directory.key)
            if parsed is not None:
                found[parsed[0]].append(directory)
        for objects in found.values():
            objects.sort(key=lambda d: d.sequence)
        return found

    @property
    def backlog(self) -> tuple[int, int, int | None]:
        """(data objects, bytes, created_ms of the oldest) still held as log objects."""
        data = [d for d in self.directories.values() if not d.is_seal and d.entries]
        oldest = min((d.created_ms for d in data), default=None)
        return len(data), sum(self.sizes.get(d.key, 0) for d in data), oldest
