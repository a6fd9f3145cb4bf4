"""The segment cache's loads: one per key however many readers, bounded in bytes, and a
cancelled or failed load never leaves readers waiting."""

import pytest
import trio

from kafscale.gateway.cache import ByteLRU


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
