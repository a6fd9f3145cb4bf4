"""The object store as the trio side sees it: each call in a worker thread under our own limiter.

obstore's async API does not run under trio, but its sync API releases the GIL,
so worker threads give real parallelism. Calls are not abandoned on
cancellation: a write that started finishes (or fails) before we move on.

A store that never waits for I/O (``waits_for_io`` false: the in-memory store) is
called on the event loop's own thread: handing a call that only copies to a worker
and back costs more than the call (a quarter of a small Produce request's CPU). Its
writes do not yield to the scheduler either (see :meth:`AsyncStore._write`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import trio

from kafscale.storage_backends import ObjectChanged, ObjectData, ObjectExists, ObjectInfo, ObjectStore, StorageError

__all__ = ["AsyncStore"]


class AsyncStore:
    def __init__(self, store: ObjectStore, threads: int) -> None:
        self.sync = store
        self._limiter = trio.CapacityLimiter(threads)
        # The error of the last write while writes fail (disk full, permission denied,
        # store down); None once one succeeds. /readyz reports it.
        self.write_failure: str | None = None
        self._healthy = trio.Event()
        self._healthy.set()
        self._probes = trio.CapacityLimiter(1)
        self._inline = not store.waits_for_io

    def describe(self) -> str:
        return self.sync.describe()

    async def _run(self, function, *args, **kwargs):
        if not self._inline:
            return await trio.to_thread.run_sync(partial(function, *args, **kwargs), limiter=self._limiter)
        # Still a checkpoint, as a thread's call is: cancellable before it starts, not after.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            return function(*args, **kwargs)
        finally:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def put(self, key: str, data: bytes, *, durable: bool = True) -> None:
        await self._write(self.sync.put, key, data, durable=durable)

    async def put_if_absent(self, key: str, data: ObjectData) -> str:
        """The new object's version (``""`` if the store did not say)."""
        return await self._write(self.sync.put_if_absent, key, data)

    async def put_if_unchanged(self, key: str, data: bytes, version: str) -> str:
        """The object's new version (``""`` if the store did not say)."""
        return await self._write(self.sync.put_if_unchanged, key, data, version)

    async def get_versioned(self, key: str) -> tuple[bytes, str]:
        return await self._run(self.sync.get_versioned, key)

    async def version(self, key: str) -> str | None:
        return await self._run(self.sync.version, key)

    async def _write(self, function, *args, **kwargs):
        try:
            if self._inline:
                # A cancel point but not a schedule point: the write waited for nothing, its
                # callers (the log writer, one object per flush) wait for other things between
                # writes, and a trip through the scheduler per object would cost a tenth of a
                # small Produce request. Reads still yield: readers loop over many objects.
                await trio.lowlevel.checkpoint_if_cancelled()
                result = function(*args, **kwargs)
            else:
                result = await self._run(function, *args, **kwargs)
        except (ObjectExists, ObjectChanged):
            self.write_failure = None  # the store answered: a lost race, not a failure
            raise
        except StorageError as exc:
            self.write_failure = str(exc) or type(exc).__name__
            if self._healthy.is_set():
                self._healthy = trio.Event()
            raise
        self.write_failure = None
        self._healthy.set()
        return result

    async def wait_writable(self, timeout_s: float) -> None:
        """Return when a write succeeds (e.g. the readiness probe's) or after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            await self._healthy.wait()

    async def probe_list(self, prefix: str) -> None:
        """A readiness check's listing: in a thread of its own, one probe at a time, abandoned
        when the caller gives up, so a store that accepts connections and never answers can
        neither hang the probe nor take the storage threads."""
        await trio.to_thread.run_sync(self.sync.list, prefix, limiter=self._probes, abandon_on_cancel=True)

    async def probe_write(self, key: str) -> None:
        """A readiness check's write (as :meth:`probe_list`); one that succeeds ends the
        write failure and wakes a writer waiting to retry."""
        await trio.to_thread.run_sync(partial(self.sync.put, key, b"ok", durable=False),
                                      limiter=self._probes, abandon_on_cancel=True)
        self.write_failure = None
        self._healthy.set()

    async def get(self, key: str) -> bytes:
        return await self._run(self.sync.get, key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._run(self.sync.get_range, key, start, end)

    async def get_view(self, key: str) -> memoryview:
        return await self._run(self.sync.get_view, key)

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        return await self._run(self.sync.get_range_view, key, start, end)

    async def head(self, key: str) -> ObjectInfo | None:
        return await self._run(self.sync.head, key)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self._run(self.sync.list, prefix)

    async def delete(self, key: str) -> None:
        await self._run(self.sync.delete, key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        """One billed request per 1,000 keys on S3, instead of one each."""
        await self._run(self.sync.delete_many, keys)
