"""Stores around a store, for tests and measurements: every call of :class:`ObjectStore`
passes through one place, where it can be counted, refused or held.

- :class:`FaultyStore` runs a *plan* before each call: the plan sees the :class:`Call`
  (operation, key, data) and may raise (an outage, an answer lost), block (a slow or hung
  store) or return, after which the inner store serves the call.
- :class:`CountingStore` records each call (operation, key, bytes moved).
- :class:`LatencyStore` makes each call take at least the time its *latency* says (an
  object store's round trip on a memory backend), in a worker thread as a remote store's
  would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .base import ObjectData, ObjectInfo, ObjectStore, ObjectStream

__all__ = ["Call", "Served", "PassThrough", "FaultyStore", "CountingStore", "LatencyStore"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    operation: str  # the ObjectStore method's name
    key: str  # the key, the prefix of a listing, or the first of delete_many's keys
    data: ObjectData | None = None  # what a write writes


class PassThrough:
    """Every :class:`ObjectStore` call, through :meth:`_before` and :meth:`_after`, to ``inner``."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.waits_for_io = inner.waits_for_io

    def _before(self, call: Call) -> None:
        """Called before the inner store serves ``call``."""

    def _after(self, call: Call, size: int) -> None:
        """Called after it served ``call``, having moved ``size`` bytes."""

    def _through(self, call: Call, serve: Callable[[], T], size: Callable[[T], int] = lambda result: 0) -> T:
        self._before(call)
        result = serve()
        self._after(call, size(result))
        return result

    def put(self, key: str, data: bytes, *, durable: bool = True) -> None:
        self._through(Call("put", key, data), lambda: self.inner.put(key, data, durable=durable))

    def put_if_absent(self, key: str, data: ObjectData) -> str:
        return self._through(Call("put_if_absent", key, data), lambda: self.inner.put_if_absent(key, data))

    def open_stream(self, key: str) -> ObjectStream:
        return self._through(Call("open_stream", key), lambda: self.inner.open_stream(key))

    def get(self, key: str) -> bytes:
        return self._through(Call("get", key), lambda: self.inner.get(key), len)

    def get_view(self, key: str) -> memoryview:
        return self._through(Call("get_view", key), lambda: self.inner.get_view(key), len)

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        return self._through(Call("get_versioned", key), lambda: self.inner.get_versioned(key), lambda r: len(r[0]))

    def put_if_unchanged(self, key: str, data: bytes, version: str) -> str:
        return self._through(Call("put_if_unchanged", key, data), lambda: self.inner.put_if_unchanged(key, data, version))

    def version(self, key: str) -> str | None:
        return self._through(Call("version", key), lambda: self.inner.version(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._through(Call("get_range", key), lambda: self.inner.get_range(key, start, end), len)

    def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        return self._through(Call("get_range_view", key), lambda: self.inner.get_range_view(key, start, end), len)

    def head(self, key: str) -> ObjectInfo | None:
        return self._through(Call("head", key), lambda: self.inner.head(key))

    def list(self, prefix: str) -> list[ObjectInfo]:
        return self._through(Call("list", prefix), lambda: self.inner.list(prefix))

    def delete(self, key: str) -> None:
        self._through(Call("delete", key), lambda: self.inner.delete(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        self._through(Call("delete_many", keys[0] if keys else ""), lambda: self.inner.delete_many(keys))

    def describe(self) -> str:
        return self.inner.describe()

    def check(self) -> None:
        self._through(Call("check", ""), self.inner.check)


class FaultyStore(PassThrough):
    """``plan(call)`` runs before each call: it raises, blocks or returns as the test needs.
    ``waits_for_io`` may be forced on, so that a plan blocking a call blocks a worker thread
    as a hung store would, not the event loop."""

    def __init__(self, inner: ObjectStore, plan: Callable[[Call], None], *, waits_for_io: bool | None = None) -> None:
        super().__init__(inner)
        self.plan = plan
        if waits_for_io is not None:
            self.waits_for_io = waits_for_io

    def _before(self, call: Call) -> None:
        self.plan(call)


@dataclass(frozen=True, slots=True)
class Served:
    call: Call
    size: int


class CountingStore(PassThrough):
    """Records every call served, with the bytes it moved (reads: the bytes returned)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.served: list[Served] = []

    def _after(self, call: Call, size: int) -> None:
        written = 0 if call.data is None else getattr(call.data, "nbytes", None) or len(call.data)
        self.served.append(Served(call, size or written))

    def count(self, *operations: str, key: Callable[[str], bool] = lambda key: True) -> int:
        """Calls of ``operations`` (every one when none is named) on keys ``key`` accepts."""
        return sum(1 for s in self.served if (not operations or s.call.operation in operations) and key(s.call.key))

    def bytes_read(self) -> int:
        return sum(s.size for s in self.served if s.call.operation.startswith("get"))


class LatencyStore(FaultyStore):
    """Each call waits ``latency(call)`` seconds before the inner store serves it: a plan that
    sleeps, in a worker thread (it waits for I/O), so a slow store never holds the event loop."""

    def __init__(self, inner: ObjectStore, latency: Callable[[Call], float]) -> None:
        super().__init__(inner, lambda call: time.sleep(latency(call)), waits_for_io=True)
