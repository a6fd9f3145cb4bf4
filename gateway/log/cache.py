"""A byte-bounded LRU of decoded segments, so tailing consumers are served from memory,
and the loads that fill it: one load per key however many readers want it at once,
and a bound on the bytes being loaded at the same time (without both, a crowd of
fetches behind on an uncached segment each held its own copy: 1.3 GB in the abuse test).

A value may own its bytes (counted at its size) or be views of buffers it shares with other
values (each buffer counted once, whole, while any value holds it): entries cached straight
from the request frames they arrived in, without a copy, still count every byte they keep."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

import trio

from kafscale.protocol.response_fields import Buffer

__all__ = ["ByteLRU"]

_MIN_LOADING_BYTES = 64 * 2**20

V = TypeVar("V")


class ByteLRU(Generic[V]):
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, tuple[V, int, tuple[int, ...]]] = OrderedDict()  # value, size, shared ids
        self._shared: dict[int, _Shared] = {}  # by id(): the buffers values hold views of
        self._loads: dict[str, _Load] = {}
        self._loading_limit = max(capacity_bytes, _MIN_LOADING_BYTES)
        self._loading_bytes = 0
        self._loaded = trio.lowlevel.ParkingLot()

    async def load(self, key: str, size: int, loader: Callable[[], Awaitable[V]]) -> V:
        """The cached value, or ``loader()``'s, which is cached; concurrent callers for the
        same key share one load, and loads wait while too many bytes are being loaded."""
        while True:
            value = self.get(key)
            if value is not None:
                return value
            pending = self._loads.get(key)
            if pending is None:
                break
            await pending.done.wait()
            if pending.error is not None:
                raise pending.error
            # Otherwise it was loaded (and is cached, unless too big: then load it again),
            # or its loader was cancelled: look again.
            if pending.value is not None:
                return pending.value
        pending = self._loads[key] = _Load()
        try:
            while self._loading_bytes and self._loading_bytes + size > self._loading_limit:
                await self._loaded.park()
            self._loading_bytes += size
            try:
                value = await loader()
            finally:
                self._loading_bytes -= size
                self._loaded.unpark_all()
            self.put(key, value, size)
            pending.finish(value, None)
            return value
        except Exception as exc:  # the readers waiting for this load get the same error
            pending.finish(None, exc)
            raise
        finally:
            del self._loads[key]
            pending.done.set()  # a cancelled load: the readers waiting for it load it themselves

    def __contains__(self, key: str) -> bool:
        """Whether ``key`` is held (no hit or miss counted, its place in the order kept)."""
        return key in self._items

    def get(self, key: str) -> V | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: str, value: V, size: int) -> None:
        """Cache ``value``, which owns ``size`` bytes."""
        if size > self.capacity:
            return
        self.discard(key)
        self._items[key] = (value, size, ())
        self.size += size
        self._evict()

    def put_shared(self, key: str, value: V, buffers: Iterable[Buffer]) -> None:
        """Cache ``value``, made of views of ``buffers`` (each counted whole, once however many
        values share it)."""
        buffers = list(buffers)
        self.discard(key)
        unheld = {id(buffer): buffer for buffer in buffers if id(buffer) not in self._shared}
        if sum(_nbytes(buffer) for buffer in unheld.values()) > self.capacity:
            return  # more than the cache holds: it would only evict everything else
        ids = []
        for buffer in buffers:
            shared = self._shared.get(id(buffer))
            if shared is None:
                shared = self._shared[id(buffer)] = _Shared(buffer)
                self.size += shared.size
            shared.holders += 1
            ids.append(id(buffer))
        self._items[key] = (value, 0, tuple(ids))
        self._evict()

    def _evict(self) -> None:
        while self.size > self.capacity and self._items:
            _, item = self._items.popitem(last=False)
            self._release(item)

    def _release(self, item: tuple[V, int, tuple[int, ...]]) -> None:
        _, size, ids = item
        self.size -= size
        for shared_id in ids:
            shared = self._shared[shared_id]
            shared.holders -= 1
            if not shared.holders:
                del self._shared[shared_id]
                self.size -= shared.size

    def discard(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._release(item)

    def discard_prefix(self, prefix: str) -> None:
        for key in [k for k in self._items if k.startswith(prefix)]:
            self.discard(key)


def _nbytes(buffer: Buffer) -> int:
    return memoryview(buffer).nbytes


class _Shared:
    """A buffer values hold views of, and how many of them do."""

    __slots__ = ("buffer", "size", "holders")

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer  # held, so its id stays its own while counted
        self.size = _nbytes(buffer)
        self.holders = 0


class _Load:
    __slots__ = ("done", "value", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value = None
        self.error: Exception | None = None

    def finish(self, value, error: Exception | None) -> None:
        self.value, self.error = value, error
        self.done.set()
