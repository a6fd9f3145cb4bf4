"""The segment cache's loads: one per key however many readers, bounded in bytes, and a
cancelled or failed load never leaves readers waiting."""

import pytest
import trio

from kafscale.gateway.log.cache import ByteLRU


async def test_concurrent_readers_share_one_load(nursery):
    cache: ByteLRU[bytes] = ByteLRU(1 << 20)
    calls = 0

    async def loader():
        nonlocal calls
        calls += 1
        await trio.sleep(0.05)
        return b"segment"

    results = []

    async def read():
        results.append(await cache.load("k", 7, loader))

    async with trio.open_nursery() as readers:
        for _ in range(20):
            readers.start_soon(read)
    assert results == [b"segment"] * 20 and calls == 1


async def test_a_cancelled_load_lets_a_waiting_reader_load_it(nursery):
    cache: ByteLRU[bytes] = ByteLRU(1 << 20)
    started = trio.Event()

    async def slow():
        started.set()
        await trio.sleep_forever()

    async def quick():
        return b"v"

    async with trio.open_nursery() as readers:
        first = trio.CancelScope()

        async def cancelled_reader():
            with first:
                await cache.load("k", 1, slow)

        readers.start_soon(cancelled_reader)
        await started.wait()
        result = []

        async def waiting_reader():
            result.append(await cache.load("k", 1, quick))

        readers.start_soon(waiting_reader)
        await trio.sleep(0.01)
        first.cancel()
    assert result == [b"v"]


async def test_a_failed_load_fails_every_waiting_reader_and_is_retried_later(nursery):
    cache: ByteLRU[bytes] = ByteLRU(1 << 20)

    async def failing():
        await trio.sleep(0.01)
        raise OSError("store down")

    errors = []

    async def read():
        try:
            await cache.load("k", 1, failing)
        except OSError as exc:
            errors.append(exc)

    async with trio.open_nursery() as readers:
        for _ in range(3):
            readers.start_soon(read)
    assert len(errors) == 3

    async def works():
        return b"ok"

    assert await cache.load("k", 1, works) == b"ok"


async def test_loads_wait_while_too_many_bytes_are_loading(nursery):
    cache: ByteLRU[bytes] = ByteLRU(0)  # nothing cached: the loading bound is 64 MiB
    active = peak = 0

    async def loader():
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await trio.sleep(0.02)
        active -= 1
        return b"x"

    async with trio.open_nursery() as readers:
        for index in range(6):
            readers.start_soon(cache.load, f"k{index}", 40 * 2**20, loader)
    assert peak == 1  # two 40 MiB loads would exceed 64 MiB: one at a time


@pytest.mark.parametrize("size", [1, 2**20])
async def test_a_value_too_big_to_cache_is_still_returned(nursery, size):
    cache: ByteLRU[bytes] = ByteLRU(size - 1 if size > 1 else 0)

    async def loader():
        return b"big"

    assert await cache.load("k", size, loader) == b"big"


def test_shared_buffers_are_counted_once_while_any_value_holds_them():
    cache: ByteLRU[memoryview] = ByteLRU(1000)
    frame = bytearray(300)
    view = memoryview(frame)
    cache.put_shared("a", view[:100], [frame])
    cache.put_shared("b", view[100:200], [frame])
    assert cache.size == 300  # the whole frame, once: the views keep all of it alive
    cache.discard("a")
    assert cache.size == 300
    cache.discard("b")
    assert cache.size == 0


def test_evicting_shared_values_frees_their_buffer_with_the_last_holder():
    cache: ByteLRU[object] = ByteLRU(1000)
    first, second = bytearray(400), bytearray(400)
    cache.put_shared("a1", "a1", [first])
    cache.put_shared("a2", "a2", [first])
    cache.put_shared("b", "b", [second])
    cache.put("owned", "owned", 300)  # 1,100 bytes: both holders of the oldest buffer go
    assert "a1" not in cache and "a2" not in cache and "b" in cache and "owned" in cache
    assert cache.size == 700


def test_a_shared_value_larger_than_the_cache_evicts_nothing():
    cache: ByteLRU[object] = ByteLRU(1000)
    cache.put("kept", "kept", 600)
    cache.put_shared("huge", "huge", [bytearray(1001)])
    assert "huge" not in cache and "kept" in cache and cache.size == 600


def test_replacing_a_shared_value_releases_its_buffers():
    cache: ByteLRU[object] = ByteLRU(1000)
    frame = bytearray(500)
    cache.put_shared("k", "view", [frame])
    cache.put("k", "copy", 50)  # first read: a copy of the entry replaces the views
    assert cache.size == 50 and cache.get("k") == "copy"
