"""PartitionLog over real backends (memory and local files), driven directly under trio."""

import pytest
import trio

from kafscale.gateway.cache import ByteLRU
from kafscale.gateway.partition_log import LogSettings, PartitionLog
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol import ErrorCode, KafkaError, build_batch, iter_records
from kafscale.protocol.layout import segment_key
from kafscale.protocol.records import Record, split_batches
from kafscale.protocol.segment import SegmentBuilder
from kafscale.storage_backends import LocalBackend, MemoryBackend, StorageUnavailable

SETTINGS = LogSettings("ns", linger_ms=5, flush_bytes=1 << 20, segment_bytes=1 << 20, index_interval=4)


def _record_set(n=3, start=0, ts=1000):
    batch = bytearray(build_batch([Record(i, ts + i, b"k%d" % (start + i), b"v%d" % (start + i)) for i in range(n)]))
    return batch, split_batches(batch)


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    backend = MemoryBackend() if request.param == "memory" else LocalBackend(tmp_path / "d")
    return AsyncStore(backend, 4)


async def _open(store, settings=SETTINGS):
    log = PartitionLog("t", 0, store, settings, ByteLRU(1 << 20))
    await log.recover()
    return log


async def test_concurrent_appends_share_one_flush(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    tickets = [log.append(*_record_set(start=i * 3)) for i in range(20)]
    assert [base for base, _ in tickets] == list(range(0, 60, 3))
    assert log.high_watermark == 0  # nothing is visible before it is durable
    for _, ticket in tickets:
        await ticket.wait()
    assert log.flushes == 1 and log.high_watermark == 60
    data = await log.read(0, 1 << 20)
    values = [r.value for h in split_batches(data) for r in iter_records(data, h)]
    assert values == [b"v%d" % i for i in range(60)]
    await log.close()


async def test_recovery_rebuilds_state_and_offsets_continue(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    for i in range(3):
        _, ticket = log.append(*_record_set(start=i * 3))
        await ticket.wait()
    await log.close()
    again = await _open(store)
    assert (again.log_start_offset, again.high_watermark, len(again.segments)) == (0, 9, 3)
    nursery.start_soon(again.run_flusher)
    base, ticket = again.append(*_record_set())
    await ticket.wait()
    assert base == 9
    assert await again.offset_for_timestamp(1002) == (2, 1002)
    await again.close()


async def test_a_torn_last_segment_is_moved_aside(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    _, ticket = log.append(*_record_set())
    await ticket.wait()
    await log.close()
    builder = SegmentBuilder(3)
    batch, headers = _record_set()
    from kafscale.protocol.records import restamp

    builder.append(batch, restamp(batch, headers, 3))
    torn = builder.seal(0)[:-5]
    await store.put_if_absent(segment_key("ns", "t", 0, 3), torn)
    recovered = await _open(store)
    assert recovered.high_watermark == 3
    assert await store.head(segment_key("ns", "t", 0, 3)) is None
    assert (await store.get(segment_key("ns", "t", 0, 3) + ".torn")) == torn


async def test_a_competing_writer_fences_us(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    # Another gateway wins offset 0 first.
    rival = await _open(store)
    nursery.start_soon(rival.run_flusher)
    _, rival_ticket = rival.append(*_record_set(n=2))
    await rival_ticket.wait()
    _, ticket = log.append(*_record_set())
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    assert log.high_watermark == 2  # reloaded from storage: the rival's data, not ours
    data = await log.read(0, 1 << 20)
    assert [r.value for h in split_batches(data) for r in iter_records(data, h)] == [b"v0", b"v1"]
    base, ticket = log.append(*_record_set())  # and it continues after the rival's data
    await ticket.wait()
    assert base == 2


class FlakyBackend(MemoryBackend):
    fail = False

    def put_if_absent(self, key, data):
        if self.fail:
            raise StorageUnavailable("injected outage")
        super().put_if_absent(key, data)


async def test_storage_outage_fails_the_flush_and_offsets_roll_back(nursery):
    backend = FlakyBackend()
    store = AsyncStore(backend, 2)
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    backend.fail = True
    _, ticket = log.append(*_record_set())
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.kafka_storage_error and info.value.code.retriable
    assert log.high_watermark == 0
    backend.fail = False
    base, ticket = log.append(*_record_set())
    await ticket.wait()
    assert base == 0 and log.high_watermark == 3


async def test_close_flushes_what_was_accepted(store, nursery):
    slow = LogSettings("ns", linger_ms=60_000, flush_bytes=1 << 30, segment_bytes=1 << 20, index_interval=4)
    log = await _open(store, slow)
    nursery.start_soon(log.run_flusher)
    _, ticket = log.append(*_record_set())
    await trio.sleep(0.05)
    assert log.high_watermark == 0
    await log.close()
    await ticket.wait()
    assert log.high_watermark == 3
    with pytest.raises(KafkaError):
        log.append(*_record_set())


async def test_big_flushes_are_split_into_bounded_segments(store, nursery):
    small = LogSettings("ns", linger_ms=50, flush_bytes=1 << 30, segment_bytes=2048, index_interval=4)
    log = await _open(store, small)
    nursery.start_soon(log.run_flusher)
    tickets = [log.append(*_record_set(n=20, start=i * 20)) for i in range(10)]
    for _, ticket in tickets:
        await ticket.wait()
    assert log.flushes > 1 and all(s.size <= 2048 + 1024 for s in log.segments)
    assert log.high_watermark == 200
    data = await log.read(57, 1 << 20)
    first = next(iter_records(data, split_batches(data)[0]))
    assert first.offset <= 57
    await log.close()


async def test_duplicate_idempotent_batch_gets_its_original_offset(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    batch = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0)
    first, ticket = log.append(bytearray(batch), split_batches(batch))
    await ticket.wait()
    again, ticket = log.append(bytearray(batch), split_batches(batch))
    await ticket.wait()
    assert first == again == 0 and log.high_watermark == 1
    gap = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=5)
    with pytest.raises(KafkaError) as info:
        log.append(bytearray(gap), split_batches(gap))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    await log.close()


async def test_idempotent_state_is_rebuilt_from_storage_when_the_partition_loads(store, nursery):
    """A batch retried after a restart (or an ownership move) is recognised from the stored batches."""
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    batches = [build_batch([(b"k", b"v%d" % i)], producer_id=7, producer_epoch=2, base_sequence=i) for i in range(3)]
    offsets = []
    for batch in batches:
        offset, ticket = log.append(bytearray(batch), split_batches(batch))
        await ticket.wait()
        offsets.append(offset)
    await log.close()

    again = await _open(store)
    nursery.start_soon(again.run_flusher)
    retried, ticket = again.append(bytearray(batches[-1]), split_batches(batches[-1]))
    await ticket.wait()
    assert retried == offsets[-1] and again.high_watermark == 3  # answered, not written twice
    stale = build_batch([(b"k", b"old")], producer_id=7, producer_epoch=1, base_sequence=3)
    with pytest.raises(KafkaError) as info:
        again.append(bytearray(stale), split_batches(stale))
    assert info.value.code == ErrorCode.invalid_producer_epoch
    gap = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=2, base_sequence=9)
    with pytest.raises(KafkaError) as info:
        again.append(bytearray(gap), split_batches(gap))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    following = build_batch([(b"k", b"v3")], producer_id=7, producer_epoch=2, base_sequence=3)
    offset, ticket = again.append(bytearray(following), split_batches(following))
    await ticket.wait()
    assert offset == 3 and again.high_watermark == 4
    await again.close()


async def test_producer_state_scan_can_be_turned_off(store, nursery):
    log = await _open(store)
    nursery.start_soon(log.run_flusher)
    batch = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0)
    _, ticket = log.append(bytearray(batch), split_batches(batch))
    await ticket.wait()
    await log.close()
    from dataclasses import replace

    again = await _open(store, replace(SETTINGS, producer_scan_bytes=0))
    nursery.start_soon(again.run_flusher)
    offset, ticket = again.append(bytearray(batch), split_batches(batch))
    await ticket.wait()
    assert offset == 1  # unknown producer: accepted as is
    await again.close()


async def test_a_write_that_outlives_the_lease_is_not_acknowledged(store, nursery):
    """Ownership checked before and after the PUT: losing it mid-write fails the request."""
    owned = [True]
    log = PartitionLog("t", 0, store, SETTINGS, ByteLRU(1 << 20), writable=lambda: owned[0])
    await log.recover()
    nursery.start_soon(log.run_flusher)
    _, ticket = log.append(*_record_set())
    await ticket.wait()
    assert log.high_watermark == 3

    real_put = store.put_if_absent

    async def put_then_lose_lease(key, data):
        await real_put(key, data)
        owned[0] = False

    store.put_if_absent = put_then_lose_lease
    _, ticket = log.append(*_record_set(start=3))
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower and log.high_watermark == 3
    _, ticket = log.append(*_record_set(start=6))  # no longer owned: refused before writing
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    store.put_if_absent = real_put
    await log.close()


class SecondWriteFails(MemoryBackend):
    """Fails the second segment write, as a store that breaks in the middle of a split flush."""

    def __init__(self) -> None:
        super().__init__()
        self.segment_writes = 0

    def put_if_absent(self, key, data):
        self.segment_writes += 1
        if self.segment_writes == 2:
            raise StorageUnavailable("the store went away")
        super().put_if_absent(key, data)


async def test_a_split_flush_that_fails_part_way_acknowledges_what_is_durable(nursery):
    small = LogSettings("ns", linger_ms=50, flush_bytes=1 << 30, segment_bytes=2048, index_interval=4)
    log = await _open(AsyncStore(SecondWriteFails(), 2), small)
    nursery.start_soon(log.run_flusher)

    def batch(sequence):
        data = build_batch([(b"k", b"x" * 1500)], producer_id=9, producer_epoch=0, base_sequence=sequence)
        return data, split_batches(data)

    first, second = batch(0), batch(1)
    (base1, ticket1), (base2, ticket2) = log.append(bytearray(first[0]), first[1]), \
        log.append(bytearray(second[0]), second[1])
    assert (base1, base2) == (0, 1) and ticket1 is ticket2  # one flush, split in two segments
    await ticket1.wait(0)  # the first segment is durable: acknowledged
    with pytest.raises(KafkaError) as info:
        await ticket2.wait(1)
    assert info.value.code == ErrorCode.kafka_storage_error
    assert log.high_watermark == 1
    # The producer retries both: the durable one is a duplicate at its offset, the other is written.
    again1, retry1 = log.append(bytearray(first[0]), first[1])
    again2, retry2 = log.append(bytearray(second[0]), second[1])
    await retry1.wait(again1)
    await retry2.wait(again2)
    assert (again1, again2) == (0, 1) and log.high_watermark == 2
    data = await log.read(0, 1 << 20)
    assert [h.base_offset for h in split_batches(data)] == [0, 1]  # nothing stored twice
    await log.close()
