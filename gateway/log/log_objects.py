"""The shared log objects a gateway knows: their directories, by writer and by partition.

Directories are immutable, so each is read once (one ranged GET of the object's
tail, rarely two) and kept; :meth:`LogObjects.refresh` lists ``~log/`` and reads
only the new ones. The gateway's own objects are added as they are written.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import trio

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import parse_log_object_key
from kafscale.protocol.log_object import LogEntry, LogObjectDirectory
from kafscale.protocol.log_view import entries_of_writers

from ..storage import AsyncStore
from .damage import DamageReport
from .stored_log import read_stored

__all__ = ["LogObjects", "read_slot"]


async def read_slot(store: AsyncStore, key: str) -> LogObjectDirectory | None:
    """The directory of whatever took a slot (a put-if-absent lost), ``None`` if it is gone;
    :class:`SegmentFormatError` if it is torn or damaged."""
    info = await store.head(key)
    return None if info is None else await read_stored(store, reads.read_directory(key, info.size))


class LogObjects:
    def __init__(self, store: AsyncStore, namespace: str, damage: DamageReport) -> None:
        self._store = store
        self._damage = damage
        self._namespace = namespace
        self.directories: dict[str, LogObjectDirectory] = {}
        self.sizes: dict[str, int] = {}
        self.unreadable: set[str] = set()
        self._by_partition: dict[tuple[str, int], list[LogEntry]] | None = None
        # Kept as objects come and go: the janitor and the fencer ask for it on the event
        # loop, and parsing every key each time stalled it (tens of ms at 30,000 objects).
        self._by_writer: dict[str, dict[int, LogObjectDirectory]] = defaultdict(dict)
        # The compaction backlog, kept as objects come and go for the same reason (a scrape of
        # the metrics walked every directory three times: 40-75 ms at 10,000 objects).
        self._data_objects = 0
        self._data_bytes = 0
        self._created: list[tuple[int, str]] = []  # (created_ms, key) of data objects; stale ones popped lazily
        self._refreshing = trio.Lock()

    def add(self, directory: LogObjectDirectory, size: int) -> None:
        self.forget(directory.key)  # a directory read again replaces what was known
        self.directories[directory.key] = directory
        self.sizes[directory.key] = size
        self._by_partition = None
        if _holds_data(directory):
            self._data_objects += 1
            self._data_bytes += size
            heapq.heappush(self._created, (directory.created_ms, directory.key))
            if len(self._created) > 2 * self._data_objects + 64:  # stale entries behind an old live one
                self._created = [entry for entry in self._created if self._is_data(entry)]
                heapq.heapify(self._created)
        parsed = parse_log_object_key(directory.key)
        if parsed is not None:
            self._by_writer[parsed[0]][parsed[1]] = directory

    def forget(self, key: str) -> None:
        directory = self.directories.pop(key, None)
        size = self.sizes.pop(key, 0)
        if directory is not None:
            self._by_partition = None
            if _holds_data(directory):
                self._data_objects -= 1
                self._data_bytes -= size
            parsed = parse_log_object_key(key)
            if parsed is not None:
                slots = self._by_writer[parsed[0]]
                slots.pop(parsed[1], None)
                if not slots:
                    del self._by_writer[parsed[0]]

    async def refresh(self) -> None:
        """List the log objects and read the directories not seen yet; objects deleted by
        others are forgotten."""
        async with self._refreshing:
            listed = dict(await read_stored(self._store, reads.list_log_objects(self._namespace)))
            for key in list(self.directories):
                if key not in listed:
                    self.forget(key)
            new = [(key, size) for key, size in listed.items()
                   if key not in self.directories and key not in self.unreadable]
            found = await read_stored(self._store, reads.gather(reads.read_directory(key, size)
                                                                   for key, size in new))
            for (key, size), directory in zip(new, found, strict=True):
                if isinstance(directory, SegmentFormatError):
                    # Torn (never acknowledged: acks wait for the whole write) or damaged since:
                    # ignored, kept for inspection. Offsets it held that no other piece holds
                    # answer CORRUPT_MESSAGE (PartitionLog.read).
                    self._damage.record(key, f"log object unreadable, ignored: {directory}")
                    self.unreadable.add(key)
                elif directory is not None:  # None: deleted since the listing
                    self.add(directory, size)

    def entries_for(self, topic: str, partition: int, topic_id: bytes | None = None) -> list[LogEntry]:
        """The partition's valid entries (of this incarnation of the topic, given its id)."""
        if self._by_partition is None:
            # Grouped by writer as objects came (every key parsed once), not by parsing them all again.
            self._by_partition = entries_of_writers(slots.values() for slots in self._by_writer.values())
        return [entry for entry in self._by_partition.get((topic, partition), ())
                if topic_id is None or entry.topic_id == topic_id]

    def writers(self) -> dict[str, list[LogObjectDirectory]]:
        """Each writer's known objects, in slot order."""
        return {writer: [slots[sequence] for sequence in sorted(slots)] for writer, slots in self._by_writer.items()}

    @property
    def backlog(self) -> tuple[int, int, int | None]:
        """(data objects, bytes, created_ms of the oldest) still held as log objects."""
        created = self._created
        while created and not self._is_data(created[0]):
            heapq.heappop(created)
        return self._data_objects, self._data_bytes, created[0][0] if created else None

    def _is_data(self, entry: tuple[int, str]) -> bool:
        directory = self.directories.get(entry[1])
        return directory is not None and directory.created_ms == entry[0] and _holds_data(directory)


def _holds_data(directory: LogObjectDirectory) -> bool:
    return not directory.is_seal and bool(directory.entries)
