"""A task's serial writes (the log writer's objects): in one long-lived thread of their own
on a store that waits for I/O, on the event loop's thread on one that does not."""

import threading

import pytest
import trio

from kafscale.gateway.storage import AsyncStore
from kafscale.storage_backends import MemoryBackend, ObjectExists, StorageError
from kafscale.storage_backends.wrappers import Call, FaultyStore


class Recording(FaultyStore):
    """Notes the thread each write ran on; a planned failure or hold per key."""

    def __init__(self, *, waits_for_io: bool = True) -> None:
        super().__init__(MemoryBackend(), self._plan, waits_for_io=waits_for_io)
        self.threads: list[str] = []
        self.keys: list[str] = []
        self.failing: set[str] = set()
        self.hold: dict[str, threading.Event] = {}

    def _plan(self, call: Call) -> None:
        if call.operation != "put_if_absent":
            return
        self.threads.append(threading.current_thread().name)
        self.keys.append(call.key)
        if call.key in self.hold:
            self.hold[call.key].wait()
        if call.key in self.failing:
            raise StorageError(f"disk full writing {call.key}")


async def test_writes_run_in_order_in_one_thread_that_ends_with_the_lane():
    backend = Recording()
    store = AsyncStore(backend, 4)
    async with store.serial_writes() as writes:
        for i in range(20):
            await writes.put_if_absent(f"k/{i}", b"%d" % i)
        lanes = [t for t in threading.enumerate() if t.name == "kafscale-write-lane"]
        assert len(lanes) == 1
    assert set(backend.threads) == {"kafscale-write-lane"} and len(backend.threads) == 20
    assert backend.keys == [f"k/{i}" for i in range(20)]
    assert backend.get("k/7") == b"7"
    assert not lanes[0].is_alive()  # closing the lane ended its thread


async def test_a_failed_write_raises_and_is_noted_as_the_stores_failure_until_one_succeeds():
    backend = Recording()
    backend.failing.add("k/bad")
    store = AsyncStore(backend, 4)
    async with store.serial_writes() as writes:
        with pytest.raises(StorageError, match="disk full"):
            await writes.put_if_absent("k/bad", b"x")
        assert store.write_failure == "disk full writing k/bad"
        backend.put("k/taken", b"first")
        with pytest.raises(ObjectExists):  # a lost race is an answer from the store, not a failure
            await writes.put_if_absent("k/taken", b"second")
        assert store.write_failure is None and backend.get("k/taken") == b"first"
        backend.failing.add("k/bad2")
        with pytest.raises(StorageError):
            await writes.put_if_absent("k/bad2", b"x")
        await writes.put_if_absent("k/good", b"x")
        assert store.write_failure is None


async def test_a_write_in_progress_is_finished_not_abandoned_when_its_task_is_cancelled():
    backend = Recording()
    release = backend.hold["k/slow"] = threading.Event()
    store = AsyncStore(backend, 4)
    async with store.serial_writes() as writes:
        timer = threading.Timer(0.4, release.set)
        timer.start()
        started = trio.current_time()
        with trio.move_on_after(0.1) as scope:
            await writes.put_if_absent("k/slow", b"x")
        assert scope.cancelled_caught and trio.current_time() - started >= 0.35
        assert backend.get("k/slow") == b"x"  # the write ended before the cancellation went on
        await writes.put_if_absent("k/next", b"y")  # and the lane serves the next write
    assert backend.get("k/next") == b"y"


async def test_a_store_that_never_waits_is_written_on_the_event_loops_thread():
    backend = Recording(waits_for_io=False)
    store = AsyncStore(backend, 4)
    async with store.serial_writes() as writes:
        await writes.put_if_absent("k/0", b"x")
        assert not [t for t in threading.enumerate() if t.name == "kafscale-write-lane"]
    assert backend.threads == [threading.current_thread().name]
