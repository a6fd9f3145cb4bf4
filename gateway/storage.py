"""The object store as the trio side sees it: each call in a worker thread under our own limiter.

obstore's async API does not run under trio, but its sync API releases the GIL,
so worker threads give real parallelism. Calls are not abandoned on
cancellation: a write that started finishes (or fails) before we move on.

A store that never waits for I/O (``waits_for_io`` false: the in-memory store) is
called on the event loop's own thread: handing a call that only copies to a worker
and back costs more than the call (a quarter of a small Produce request's CPU). Its
writes do not yield to the scheduler either (see :meth:`AsyncStore._write`).

A task that writes one object after another (the log writer: an object per flush) takes a
lane of its own (:meth:`AsyncStore.serial_writes`): one long-lived thread, whose
completion wakes that task directly, where a call handed to trio's worker threads takes
three passes of the scheduler (the limiter's checkpoint, trio's queue of calls from
threads, then the task).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Protocol

import outcome
import trio

from kafscale.storage_backends import ObjectChanged, ObjectData, ObjectExists, ObjectInfo, ObjectStore, StorageError

__all__ = ["AsyncStore", "ObjectWrites"]


class ObjectWrites(Protocol):
    """Where a task's writes of new objects go (:meth:`AsyncStore.serial_writes`)."""

    async def put_if_absent(self, key: str, data: ObjectData) -> str: ...


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
        return await self.write_by(self._execute_write, partial(function, *args, **kwargs))

    async def _execute_write(self, call: Callable[[], Any]) -> Any:
        if self._inline:
            # A cancel point but not a schedule point: the write waited for nothing, its
            # callers (the log writer, one object per flush) wait for other things between
            # writes, and a trip through the scheduler per object would cost a tenth of a
            # small Produce request. Reads still yield: readers loop over many objects.
            await trio.lowlevel.checkpoint_if_cancelled()
            return call()
        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def write_by(self, execute: Callable[[Callable[[], Any]], Any], call: Callable[[], Any]) -> Any:
        """``call`` (a write) made by ``execute``, and what its outcome says of the store."""
        try:
            result = await execute(call)
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

    @asynccontextmanager
    async def serial_writes(self) -> AsyncIterator[ObjectWrites]:
        """Writes for one task, one at a time: in a thread of their own while the context is
        open (this store itself where writes are calls on the event loop's thread)."""
        if self._inline:
            yield self
            return
        lane = _WriteLane(self)
        try:
            yield lane
        finally:
            lane.close()

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


class _WriteLane:
    """One thread making one task's writes in turn. It signals a pipe the task waits on, so
    the task wakes in the scheduler's next pass (a pipe, not trio's run_sync_soon: that wakes a
    task of trio's that then wakes ours, a pass more). One write at a time: one waiter."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._calls: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._done: outcome.Outcome | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._thread = threading.Thread(target=self._serve, name="kafscale-write-lane", daemon=True)
        self._thread.start()

    async def put_if_absent(self, key: str, data: ObjectData) -> str:
        return await self._store.write_by(self._in_thread, partial(self._store.sync.put_if_absent, key, data))

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            self._done = outcome.capture(call)
            os.write(self._wake_write, b"!")

    async def _in_thread(self, call: Callable[[], Any]) -> Any:
        self._calls.put(call)
        try:
            await self._woken()
        except BaseException:
            # Cancelled: a write that started is finished, not abandoned (as a worker thread's
            # would be); its outcome is waited for, then the cancellation goes on.
            with trio.CancelScope(shield=True):
                await self._woken()
            self._done = None
            raise
        done, self._done = self._done, None
        assert done is not None
        return done.unwrap()

    async def _woken(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._wake_read)
            try:
                os.read(self._wake_read, 1)
                return
            except BlockingIOError:  # woken for nothing
                continue

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join()
        trio.lowlevel.notify_closing(self._wake_read)
        os.close(self._wake_read)
        os.close(self._wake_write)
