"""A byte-bounded LRU of decoded segments, so tailing consumers are served from memory."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["ByteLRU"]

V = TypeVar("V")


class ByteLRU(Generic[V]):
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()

    def get(self, key: str) -> V | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: str, value: V, size: int) -> None:
        if size > self.capacity:
            return
        self.discard(key)
        self._items[key] = (value, size)
        self.size += size
        while self.size > self.capacity:
            _, (_, evicted) = self._items.popitem(last=False)
            self.size -= evicted

    def discard(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.size -= item[1]

    def discard_prefix(self, prefix: str) -> None:
        for key in [k for k in self._items if k.startswith(prefix)]:
            self.discard(key)
