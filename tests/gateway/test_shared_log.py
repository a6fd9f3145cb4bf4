"""The shared log under trio over real backends (memory and local files): one log object per
flush for every partition, seals, writes in doubt, compaction and the janitor, recovery."""

import types
from dataclasses import replace

import pytest
import trio

from kafscale.gateway.clock import Clock, ManualClock
from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.log.cache import ByteLRU
from kafscale.gateway.log.compaction import Compactor, compact
from kafscale.gateway.log.logs import shared_log
from kafscale.gateway.log.partition_log import AppendedEntry, LogSettings, PartitionLog
from kafscale.gateway.log.recovery import recover
from kafscale.gateway.log.timestamps import offset_for_timestamp
from kafscale.gateway.maintenance import MaintenanceFailures
from kafscale.gateway.ownership import Mode, SoleGateway
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol import ErrorCode, KafkaError, build_batch, iter_records
from kafscale.protocol.layout import log_prefix, parse_segment_key, segment_key
from kafscale.protocol.log_object import EntryBatches
from kafscale.protocol.records import Record, restamp, split_batches
from kafscale.protocol.segment import SegmentBuilder
from kafscale.storage_backends import LocalBackend, MemoryBackend, StorageUnavailable
from kafscale.storage_backends.base import joined
from kafscale.storage_backends.wrappers import Call, CountingStore, FaultyStore

SETTINGS = LogSettings("ns", segment_bytes=1 << 20, index_interval=4)


def _record_set(n=3, start=0, ts=1000):
    batch = bytearray(build_batch([Record(i, ts + i, b"k%d" % (start + i), b"v%d" % (start + i)) for i in range(n)]))
    return batch, split_batches(batch)


def _values(views):
    """The values of what ``PartitionLog.read`` answered (views of stored objects)."""
    data = b"".join(views)
    return [r.value for h in split_batches(data) for r in iter_records(data, h)]


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    backend = MemoryBackend() if request.param == "memory" else LocalBackend(tmp_path / "d")
    return AsyncStore(backend, 4)


CLOCK = Clock()


class Node:
    """One gateway run's log machinery: its log objects, writer and partition logs."""

    def __init__(self, store, node_id=0, linger_ms=5, settings=SETTINGS, alone=True, fill_wait_ms=0, clock=CLOCK):
        self.store = store
        self.clock = clock
        machinery = shared_log(store, "ns", node_id, linger_ms, 1 << 20, mode=Mode.EMBEDDED if alone else Mode.CLUSTER,
                               clock=clock, live_nodes=lambda: {0, 1}, fill_wait_ms=fill_wait_ms)  # as the log manager wires it
        self.damage, self.objects = machinery.damage, machinery.objects
        self.writer, self.fencer = machinery.writer, machinery.fencer
        self.settings = settings
        self.epochs = {}  # (topic, partition) -> the epoch this node owns it under

    async def start(self, nursery):
        await self.fencer.seal_earlier_runs()
        await self.writer.open()
        await nursery.start(self.writer.run)
        return self

    def lose(self, partition, topic="t"):
        self.epochs[(topic, partition)] = None

    def own(self, partition, topic="t"):
        """Own the partition (again): under a newer epoch, as a cluster hands it out."""
        known = [epoch for epoch in self.epochs.values() if epoch is not None]
        self.epochs[(topic, partition)] = max(known, default=0) + 1

    async def open(self, partition=0, topic="t", fence=False, cache=None):
        if self.epochs.get((topic, partition)) is None:
            self.own(partition, topic)
        unit = (topic, partition)
        cache = ByteLRU(1 << 20) if cache is None else cache
        log = PartitionLog(topic, partition, self.store, self.settings, cache, self.writer,
                           epoch=self.epochs[unit], owned_epoch=lambda: self.epochs[unit], damage=self.damage, clock=self.clock)
        if fence:
            await self.fencer.fence((topic, partition))
        await recover(log, self.objects)
        return log


async def _log_objects(store):
    return [i for i in await store.list(log_prefix("ns")) if i.size]


async def test_every_partition_shares_one_object_per_flush(store, nursery):
    node = await Node(store).start(nursery)
    logs = [await node.open(p) for p in range(6)]
    tickets = [log.append(*_record_set(start=i * 3)) for log in logs for i in range(5)]
    assert all(log.high_watermark == 0 for log in logs)  # nothing is visible before it is durable
    for _, ticket in tickets:
        await ticket.wait()
    assert node.writer.objects_written == 1
    assert [log.high_watermark for log in logs] == [15] * 6
    assert _values(await logs[3].read(0, 1 << 20)) == [b"v%d" % i for i in range(15)]
    assert len(await _log_objects(store)) == 2  # the writer's opening slot and the one flush


async def test_written_entries_are_cached_as_appended_and_copied_only_once_read(store, nursery):
    node = await Node(store).start(nursery)
    cache = ByteLRU(1 << 20)
    logs = [await node.open(p, cache=cache) for p in range(3)]
    sets = [_record_set(start=p * 3) for p in range(3)]
    frame = bytearray(b"".join(batch for batch, _ in sets))  # one request's records for three partitions
    view, position, tickets = memoryview(frame), 0, []
    for log, (batch, _) in zip(logs, sets, strict=True):
        records = view[position:position + len(batch)]
        position += len(batch)
        tickets.append(log.append(records, split_batches(records))[1])
    tickets.append(logs[0].append(*_record_set(start=100))[1])  # partition 0's entry: two record sets
    for ticket in tickets:
        await ticket.wait()
    assert node.writer.objects_written == 1
    cached = [cache.get(log.pieces[-1].cache_key) for log in logs]
    assert all(isinstance(entry, AppendedEntry) for entry in cached)
    assert all(entry.record_sets[0][0].obj is frame for entry in cached)  # views of the frame: no copy
    second = len(cached[0].record_sets[1][0])
    assert cache.size == len(frame) + second  # the frame counted once, whole; the other set as itself
    assert _values(await logs[1].read(0, 1 << 20)) == [b"v3", b"v4", b"v5"]
    assert cache.size == len(frame) + second  # one record set: still served from the frame
    assert _values(await logs[0].read(0, 1 << 20)) == [b"v0", b"v1", b"v2", b"v100", b"v101", b"v102"]
    entry = cache.get(logs[0].pieces[-1].cache_key)
    assert isinstance(entry, EntryBatches) and len(entry.data) == len(sets[0][0]) + second  # joined once read
    assert cache.size == len(frame) + len(entry.data)  # the others still hold the frame


def _large_record_set(size, start):
    batch = bytearray(build_batch([Record(0, 1000, b"k%d" % start, bytes(size))]))
    return batch, split_batches(batch)


async def test_without_linger_an_object_fills_under_load_but_a_trickle_never_waits(store, nursery):
    node = await Node(store, linger_ms=0, fill_wait_ms=1000).start(nursery)
    log = await node.open()
    _, first = log.append(*_record_set())
    await first.wait()  # after a quiet start: written at once
    assert node.writer.objects_written == 1
    # 300 KB arriving right after a flush took what was pending: the next object waits to fill.
    _, heavy = log.append(*_large_record_set(300_000, 1))
    await trio.sleep(0.05)
    assert not heavy.done
    _, joining = log.append(*_record_set(start=10))
    await heavy.wait()
    await joining.wait()
    assert node.writer.objects_written == 2  # the two appends shared one object
    await trio.sleep(0.3)
    started = trio.current_time()
    _, trickle = log.append(*_record_set(start=20))  # a few bytes after a pause: no wait
    await trickle.wait()
    assert trio.current_time() - started < 0.5
    assert node.writer.objects_written == 3


async def test_a_restart_reads_log_objects_and_offsets_continue(store, nursery):
    node = await Node(store).start(nursery)
    log = await node.open()
    for i in range(3):
        _, ticket = log.append(*_record_set(start=i * 3))
        await ticket.wait()
    again = await Node(store).start(nursery)  # a new run seals the old one first
    log2 = await again.open()
    assert (log2.log_start_offset, log2.high_watermark) == (0, 9)
    base, ticket = log2.append(*_record_set(start=9))
    await ticket.wait()
    assert base == 9
    assert await offset_for_timestamp(log2, 1002) == (2, 1002)
    # The old run is fenced: whatever it still holds can never be stored.
    _, ticket = log.append(*_record_set(start=100))
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    third = await Node(store).start(nursery)
    assert _values(await (await third.open()).read(0, 1 << 20)) == [b"v%d" % i for i in range(12)]


async def test_taking_a_partition_over_seals_it_in_the_former_owners_writer(store, nursery):
    a = await Node(store, node_id=0, alone=False).start(nursery)
    b = await Node(store, node_id=1, alone=False).start(nursery)
    a0, a1 = await a.open(0), await a.open(1)
    for log in (a0, a1):
        _, ticket = log.append(*_record_set())
        await ticket.wait()
    b0 = await b.open(0, fence=True)  # b takes partition 0 over; a keeps partition 1
    assert b0.high_watermark == 3
    _, lost = a0.append(*_record_set(start=3))
    _, kept = a1.append(*_record_set(start=3))
    with pytest.raises(KafkaError) as info:
        await lost.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower and a0.fenced
    await kept.wait()  # written again at the slot after the seal
    assert a1.high_watermark == 6
    base, ticket = b0.append(*_record_set(start=3))
    await ticket.wait()
    assert base == 3
    reader = await Node(store, node_id=2).start(nursery)
    assert _values(await (await reader.open(0)).read(0, 1 << 20)) == [b"v%d" % i for i in range(6)]
    assert _values(await (await reader.open(1)).read(0, 1 << 20)) == [b"v%d" % i for i in range(6)]


class DelayedPuts(FaultyStore):
    """Holds log-object PUTs of one writer until released: a PUT delayed past the lease
    (in a worker thread, as a hanging store would hold it)."""

    def __init__(self):
        super().__init__(MemoryBackend(), self._hold_one, waits_for_io=True)
        self.hold: str | None = None
        self.held = None
        self.release = None

    def _hold_one(self, call: Call) -> None:
        if call.operation == "put_if_absent" and self.hold and self.hold in call.key:
            self.hold = None  # this one PUT only (not the seal another gateway puts there)
            self.held.set()
            self.release.wait()


async def test_a_put_delayed_past_the_lease_never_becomes_visible(nursery):
    import threading

    backend = DelayedPuts()
    store = AsyncStore(backend, 4)
    a = await Node(store, node_id=0, alone=False).start(nursery)
    b = await Node(store, node_id=1, alone=False).start(nursery)
    a0 = await a.open(0)
    _, ticket = a0.append(*_record_set())
    await ticket.wait()
    backend.hold, backend.held, backend.release = a.writer.writer_id, threading.Event(), threading.Event()
    _, delayed = a0.append(*_record_set(start=50))
    await trio.to_thread.run_sync(backend.held.wait)
    a.lose(0)  # the lease runs out while the PUT hangs
    b0 = await b.open(0, fence=True)
    for i in range(2):
        _, ticket = b0.append(*_record_set(start=3 + 3 * i))
        await ticket.wait()
    backend.release.set()
    with pytest.raises(KafkaError) as info:
        await delayed.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    reader = await Node(store, node_id=2).start(nursery)
    log = await reader.open(0)
    data = b"".join(await log.read(0, 1 << 20))
    assert _values([data]) == [b"v%d" % i for i in range(9)]  # nothing of the delayed write
    offsets = [r.offset for h in split_batches(data) for r in iter_records(data, h)]
    assert offsets == list(range(9))


class Outage(FaultyStore):
    """Log-object PUTs fail while ``down``."""

    def __init__(self):
        super().__init__(MemoryBackend(), self._fail)
        self.down = False
        self.attempts = 0

    def _fail(self, call: Call) -> None:
        if call.operation == "put_if_absent" and self.down and "/~log/" in call.key:
            self.attempts += 1
            raise StorageUnavailable("injected outage")


async def test_a_write_in_doubt_is_retried_and_never_reuses_offsets(nursery):
    backend = Outage()
    store = AsyncStore(backend, 2)
    node = await Node(store).start(nursery)
    log = await node.open()
    backend.down = True
    batch = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=0)
    base, ticket = log.append(bytearray(batch), split_batches(batch))
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.kafka_storage_error and node.writer.failing
    # The producer retries: the same batch, still in doubt, gets the same answer.
    again, retry = log.append(bytearray(batch), split_batches(batch))
    assert again == base == 0 and retry is ticket
    backend.down = False
    await store.put("probe", b"")  # a successful write (the readiness probe) wakes the writer
    while node.writer.failing:
        await trio.sleep(0.01)
    again, retry = log.append(bytearray(batch), split_batches(batch))
    await retry.wait()
    assert again == 0 and log.high_watermark == 1 and backend.attempts >= 1
    next_base, ticket = log.append(*_record_set())
    await ticket.wait()
    assert next_base == 1


async def test_close_waits_for_what_was_accepted(store, nursery):
    node = await Node(store, linger_ms=60_000).start(nursery)
    log = await node.open()
    _, ticket = log.append(*_record_set())
    await trio.sleep(0.05)
    assert log.high_watermark == 0
    await log.close()
    await ticket.wait()
    assert log.high_watermark == 3
    with pytest.raises(KafkaError):
        log.append(*_record_set())


async def test_losing_the_partition_before_the_write_fails_and_rolls_numbering_back(store, nursery):
    node = await Node(store, linger_ms=50).start(nursery)
    log = await node.open()
    _, ticket = log.append(*_record_set())
    node.lose(0)
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower and log.high_watermark == 0
    node.epochs[("t", 0)] = log.epoch  # owned again under the same epoch (a lease renewed in time)
    base, ticket = log.append(*_record_set())
    await ticket.wait()
    assert base == 0


class _Manager:
    """What the compactor and janitor ask of the log manager."""

    def __init__(self, store, node, logs, node_id=0):
        self.config = GatewayConfig.of(node_id=node_id, namespace="ns", storage="memory://")
        self.objects, self.writer, self.store, self.damage = node.objects, node.writer, store, node.damage
        self.ownership = SoleGateway(node_id, "127.0.0.1", 9092)
        self.clock = node.clock
        self._logs = logs

    def loaded(self):
        return self._logs

    def loaded_log(self, topic, partition):
        return next((log for log in self._logs if log.partition == partition), None)

    def topics(self):
        import uuid

        info = type("I", (), {"partitions": 2, "topic_id": uuid.UUID(int=0), "log_start": {}})
        return {"t": info}


async def test_compaction_writes_bounded_segments_and_the_janitor_deletes_log_objects(store, nursery):
    from kafscale.gateway.log.compaction import Compactor

    settings = replace(SETTINGS, segment_bytes=2048)
    node = await Node(store, settings=settings).start(nursery)
    logs = [await node.open(p) for p in range(2)]
    for i in range(10):
        for log in logs:
            _, ticket = log.append(*_record_set(n=20, start=i * 20))
            await ticket.wait()
    assert len(await _log_objects(store)) == 21

    compactor = Compactor(_Manager(store, node, logs), MaintenanceFailures())
    await compactor.pass_once(everything=True)
    for log in logs:
        segments = [p for p in log.pieces if p.kind == "segment"]
        assert len(segments) > 1 and all(p.size <= 2048 + 1024 for p in segments)
        assert log.compacted_end == log.high_watermark == 200 and not log.entry_pieces()
        data = b"".join(await log.read(57, 1 << 20))
        assert next(iter_records(data, split_batches(data)[0])).offset <= 57
    assert len(await _log_objects(store)) == 1  # only the writer's newest object is kept
    # A restart sees exactly the same log, from segments alone.
    again = await Node(store).start(nursery)
    log = await again.open(1)
    assert log.high_watermark == 200 and not log.entry_pieces()
    assert _values(await log.read(0, 1 << 20)) == [b"v%d" % i for i in range(200)]


class CountingReads(CountingStore):
    """Counts whole-object and ranged reads of segments."""

    def __init__(self):
        super().__init__(MemoryBackend())
        self.whole, self.ranged = 0, 0

    def _after(self, call: Call, size: int) -> None:
        super()._after(call, size)
        if call.key.endswith(".kfs"):
            self.whole += call.operation in ("get", "get_view")
            self.ranged += call.operation == "get_range_view"


async def test_a_large_segment_is_read_in_windows_its_index_bounds(nursery, monkeypatch):
    from kafscale.gateway.log import compaction, partition_log

    monkeypatch.setattr(partition_log, "WINDOW_BYTES", 1024)
    monkeypatch.setattr(compaction, "INDEX_MIN_BYTES", 1024)
    backend = CountingReads()
    store = AsyncStore(backend, 4)
    node = await Node(store, settings=replace(SETTINGS, segment_bytes=1 << 20)).start(nursery)
    log = await node.open(1)
    for i in range(60):
        _, ticket = log.append(*_record_set(n=20, start=i * 20))
        await ticket.wait()
    await Compactor(_Manager(store, node, [log]), MaintenanceFailures()).pass_once(everything=True)
    (segment,) = [p for p in log.pieces if p.kind == "segment"]
    assert segment.size > 8 * 1024

    again = await Node(store).start(nursery)
    fresh = await again.open(1)
    fresh.cache.discard(segment.cache_key)  # recovery read the last segment whole: a consumer would not
    values, offset = [], 0
    backend.whole = backend.ranged = 0
    while offset < 1200:
        data = b"".join(await fresh.read(offset, 1500))
        batch_values = _values([data])
        values += batch_values[: 1200 - offset] if offset == 0 else batch_values
        offset = split_batches(data)[-1].last_offset + 1
    assert values == [b"v%d" % i for i in range(1200)]
    assert backend.whole == 0 and backend.ranged > 8  # window by window, never the whole segment
    everything = await fresh.read(0, 1 << 20)  # one read across windows
    assert _values(everything) == [b"v%d" % i for i in range(1200)]
    # Batches adjacent in one window are answered as one view of it, not one each.
    assert len(everything) <= len(split_batches(b"".join(everything))) / 3


async def test_windows_of_a_cleaned_segment_read_across_its_gaps(nursery, monkeypatch):
    """A gap left by cleaning at a window's end: the next window is read, never the same again."""
    from kafscale.gateway.log import partition_log
    from kafscale.protocol.index import build_index
    from kafscale.protocol.layout import index_key
    from kafscale.protocol.segment import read_segment

    monkeypatch.setattr(partition_log, "WINDOW_BYTES", 1024)
    builder = SegmentBuilder(0)
    expected = []
    for number in range(12):
        start = number * 100
        builder.skip_to(start)  # offsets between batches were cleaned away
        batch = bytearray(build_batch([Record(i, 1000, b"k%d" % (start + i), b"v%d-" % (start + i) + bytes(60))
                                       for i in range(10)]))
        builder.append(batch, restamp(batch, split_batches(batch), start))
        expected += [b"v%d-" % (start + i) + bytes(60) for i in range(10)]
    builder.skip_to(1200)
    data = bytes(builder.seal(0))
    segment = read_segment(data)
    backend = CountingReads()
    backend.put(segment_key("ns", "t", 0, 0), data)
    backend.put(index_key("ns", "t", 0, 0), build_index(segment.batches, 10, len(data)).encode())
    node = await Node(AsyncStore(backend, 4)).start(nursery)
    log = await node.open(0)
    log.cache.discard(f"{segment_key('ns', 't', 0, 0)}@{len(data)}")  # as a consumer would find it
    backend.whole = backend.ranged = 0
    assert _values(await log.read(0, 1 << 20)) == expected
    assert backend.whole == 0 and backend.ranged >= 4
    assert _values(await log.read(150, 1 << 20)) == expected[20:]  # from inside a gap


async def test_compaction_takes_at_most_its_share_of_time(autojump_clock, monkeypatch):
    """After each segment the compactor pauses so that its work is at most its time share."""
    from kafscale.gateway.log import compaction

    written = []

    async def slow_compact(partition_log):
        await trio.sleep(1)  # one segment's work
        written.append(trio.current_time())
        return 10

    monkeypatch.setattr(compaction, "compact", slow_compact)
    async def nothing_to_merge(partition_log):
        return 0

    monkeypatch.setattr(compaction, "due", lambda partition_log, now: len(written) < 3)
    monkeypatch.setattr(compaction, "merge", nothing_to_merge)
    partition = types.SimpleNamespace(redundant=[], topic="t", partition=0)
    manager = type("M", (), {"loaded": lambda self: [partition]})()
    compactor = compaction.Compactor(manager, MaintenanceFailures(), time_share=0.25)
    compactor._collected_at = float("inf")  # no collection in this test
    started = trio.current_time()
    await compactor.pass_once()
    # 1 s of work, then 3 s of pause, each time.
    assert [round(t - started, 3) for t in written] == [1.0, 5.0, 9.0]
    assert round(trio.current_time() - started, 3) == 12.0


async def test_compaction_over_a_segment_written_before_takes_it_as_written(store, nursery):
    """A run killed after its segment PUT (or a former owner) wrote the segment already: the
    same batches, so a second compaction of the same entries keeps it and moves on."""
    node = await Node(store).start(nursery)
    log = await node.open()
    for i in range(4):
        _, ticket = log.append(*_record_set(start=i * 3))
        await ticket.wait()
    stale = await node.open()  # loaded before the compaction below: it still sees only entries
    assert await compact(log) == 12
    assert stale.compacted_end == 0 and len(stale.entry_pieces()) == 4
    assert await compact(stale) == 12
    assert stale.compacted_end == 12 and not stale.entry_pieces()
    keys = [i.key for i in await store.list("ns/t/0/") if parse_segment_key(i.key) is not None]
    assert keys == [segment_key("ns", "t", 0, 0)]
    assert _values(await stale.read(0, 1 << 20)) == [b"v%d" % i for i in range(12)]


async def test_compaction_reads_entries_without_filling_the_cache(store, nursery):
    """Compaction copies one entry at a time into the segment it builds: entries it reads
    from the store are not cached (they would evict what consumers read)."""
    node = await Node(store).start(nursery)
    log = await node.open()
    for i in range(4):
        _, ticket = log.append(*_record_set(start=i * 3))
        await ticket.wait()
    entries = log.entry_pieces()
    for piece in entries:
        log.cache.discard(piece.cache_key)
    cached_before = log.cache.size
    assert await compact(log) == 12
    assert all(log.cache.get(piece.cache_key) is None for piece in entries)
    segment = log.pieces[0]
    assert log.cache.size == cached_before + segment.size  # the new segment only
    assert _values(await log.read(0, 1 << 20)) == [b"v%d" % i for i in range(12)]


async def test_idempotent_state_is_rebuilt_from_log_objects_and_segments(store, nursery):
    node = await Node(store).start(nursery)
    log = await node.open()
    batches = [build_batch([(b"k", b"v%d" % i)], producer_id=7, producer_epoch=2, base_sequence=i) for i in range(3)]
    offsets = []
    for i, batch in enumerate(batches):
        offset, ticket = log.append(bytearray(batch), split_batches(batch))
        await ticket.wait()
        offsets.append(offset)
        if i == 0:
            await compact(log)  # the first batch in a segment, the others in log objects
    again = await Node(store).start(nursery)
    log2 = await again.open()
    retried, ticket = log2.append(bytearray(batches[-1]), split_batches(batches[-1]))
    await ticket.wait()
    assert retried == offsets[-1] and log2.high_watermark == 3  # answered, not written twice
    stale = build_batch([(b"k", b"old")], producer_id=7, producer_epoch=1, base_sequence=3)
    with pytest.raises(KafkaError) as info:
        log2.append(bytearray(stale), split_batches(stale))
    assert info.value.code == ErrorCode.invalid_producer_epoch
    following = build_batch([(b"k", b"v3")], producer_id=7, producer_epoch=2, base_sequence=3)
    offset, ticket = log2.append(bytearray(following), split_batches(following))
    await ticket.wait()
    assert offset == 3


async def test_a_topic_created_again_does_not_see_the_old_ones_records(store, nursery):
    node = await Node(store).start(nursery)
    old = PartitionLog("t", 0, store, SETTINGS, ByteLRU(1 << 20), node.writer, epoch=0,
                       owned_epoch=lambda: 0, damage=node.damage, clock=CLOCK, topic_id=b"\x01" * 16)
    await recover(old, node.objects)
    _, ticket = old.append(*_record_set())
    await ticket.wait()
    new = PartitionLog("t", 0, store, SETTINGS, ByteLRU(1 << 20), node.writer, epoch=0,
                       owned_epoch=lambda: 0, damage=node.damage, clock=CLOCK, topic_id=b"\x02" * 16)
    await recover(new, node.objects)
    assert new.high_watermark == 0


async def write_previous_format(store, segments: int) -> None:
    """Before shared log objects, every flush wrote its own segment (and index) per partition:
    ``segments`` of 3 records each."""
    for base in range(0, 3 * segments, 3):
        builder = SegmentBuilder(base)
        batch, headers = _record_set(start=base)
        builder.append(batch, restamp(batch, headers, base))
        await store.put_if_absent(segment_key("ns", "t", 0, base), builder.seal(0))


async def test_segments_written_by_the_previous_format_are_read(store, nursery):
    await write_previous_format(store, 3)
    node = await Node(store).start(nursery)
    log = await node.open()
    assert (log.log_start_offset, log.high_watermark, log.compacted_end) == (0, 9, 9)
    offset, ticket = log.append(*_record_set(start=9))
    await ticket.wait()
    assert offset == 9
    assert _values(await log.read(0, 1 << 20)) == [b"v%d" % i for i in range(12)]
    assert await offset_for_timestamp(log, 1001) == (1, 1001)


async def test_a_torn_last_segment_is_moved_aside(store, nursery):
    builder = SegmentBuilder(0)
    batch, headers = _record_set()
    builder.append(batch, restamp(batch, headers, 0))
    await store.put_if_absent(segment_key("ns", "t", 0, 0), builder.seal(0))
    torn = SegmentBuilder(3)
    torn.append(batch, restamp(bytearray(batch), headers, 3))
    await store.put_if_absent(segment_key("ns", "t", 0, 3), torn.seal(0)[:-5])
    node = await Node(store).start(nursery)
    log = await node.open()
    assert log.high_watermark == 3
    keys = [i.key for i in await store.list("ns/t/0/")]
    assert segment_key("ns", "t", 0, 3) + ".torn" in keys


async def test_the_janitor_never_deletes_a_seal_ahead_of_its_writer(store, nursery):
    """A seal put in the slot this writer will write next must stay until the writer meets
    it: deleting it would let the writer store a partition another gateway took over."""
    from kafscale.gateway.log.compaction import Compactor

    a = await Node(store, node_id=0, alone=False).start(nursery)
    b = await Node(store, node_id=1, alone=False).start(nursery)
    a0 = await a.open(0)
    for i in range(3):
        _, ticket = a0.append(*_record_set(start=3 * i))
        await ticket.wait()
    await b.open(0, fence=True)  # a seal goes in a's next slot,
    await b.open(1, fence=True)  # and another one after it
    await a.objects.refresh()
    await Compactor(_Manager(store, a, [a0]), MaintenanceFailures()).collect()
    _, ticket = a0.append(*_record_set(start=9))
    with pytest.raises(KafkaError) as info:
        await ticket.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower


async def test_a_sealed_writer_stays_dead_however_late_its_put_lands(nursery):
    """Issue 20 item 1: the seal of a dead writer is never deleted, whatever the janitor's
    clock says, so a PUT held in the network past everything still finds its slot taken."""
    import threading

    backend = DelayedPuts()
    store = AsyncStore(backend, 4)
    a = await Node(store, node_id=0, alone=False).start(nursery)
    a0 = await a.open(0)
    _, ticket = a0.append(*_record_set())
    await ticket.wait()
    sealed_writer = a.writer.writer_id
    backend.hold, backend.held, backend.release = sealed_writer, threading.Event(), threading.Event()
    _, late = a0.append(*_record_set(start=50))
    await trio.to_thread.run_sync(backend.held.wait)  # a's PUT for its next slot hangs
    clock = ManualClock(CLOCK.now_ms())
    try:
        b = await Node(store, node_id=0, clock=clock).start(nursery)  # a newer run of the node seals a whole
        b0 = await b.open(0)
        assert await compact(b0) == 3
        clock.advance(10 * 365 * 86400 * 1000)  # the janitor's clock: ten years later
        janitor = Compactor(_Manager(store, b, [b0]), MaintenanceFailures())
        for _ in range(3):  # deletes a's settled objects, and would delete the seal next
            await b.objects.refresh()
            await janitor.collect()
    finally:
        backend.release.set()  # a failure above must not leave the writer's thread held for good
    with pytest.raises(KafkaError) as info:
        await late.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    assert a.writer.writer_id != sealed_writer  # a cluster member writes on as a new writer
    reader = await Node(store, node_id=2).start(nursery)
    assert _values(await (await reader.open(0)).read(0, 1 << 20)) == [b"v0", b"v1", b"v2"]
    remaining = [i.key for i in await store.list(log_prefix("ns", sealed_writer))]
    assert len(remaining) == 1  # the seal, for good


class FailingLogPuts(FaultyStore):
    """One writer's own PUTs of data objects fail (outcome unknown) while ``down``; seals
    other gateways put in its slots go through."""

    def __init__(self):
        super().__init__(MemoryBackend(), self._fail)
        self.down: str | None = None

    def _fail(self, call: Call) -> None:
        if (call.operation == "put_if_absent" and self.down and self.down in call.key
                and joined(call.data)[6:8] == b"\x00\x00"):  # kind 0: data
            raise StorageUnavailable("injected: the PUT's answer was lost")


async def test_appends_accepted_under_a_lost_epoch_are_never_written(nursery):
    """Issue 20 item 2: a has appends queued while a write is in doubt, loses the partition
    (b seals it and acknowledges other data at those offsets), then owns it again under a
    new epoch. The stale appends must fail, never be written at offsets b used."""
    backend = FailingLogPuts()
    store = AsyncStore(backend, 4)
    a = await Node(store, node_id=0, alone=False).start(nursery)
    b = await Node(store, node_id=1, alone=False).start(nursery)
    a0, a1 = await a.open(0), await a.open(1)
    _, ticket = a0.append(*_record_set())
    await ticket.wait()
    backend.down = a.writer.writer_id
    _, in_doubt = a1.append(*_record_set())  # a's next object is in doubt
    with pytest.raises(KafkaError):
        await in_doubt.wait()
    _, stale = a0.append(*_record_set(start=100))  # accepted while the write is retried
    a.lose(0)
    b0 = await b.open(0, fence=True)  # b seals partition 0 in a's in-doubt slot
    _, ticket = b0.append(*_record_set(start=3))
    await ticket.wait()
    a.own(0)  # a is given partition 0 back, under a newer epoch, before its write is decided
    backend.down = None
    await store.put("probe", b"")  # wakes a's writer: its retry meets b's seal
    with trio.fail_after(10), pytest.raises(KafkaError) as info:
        await stale.wait()
    assert info.value.code == ErrorCode.not_leader_or_follower
    await in_doubt.wait()  # partition 1 was not sealed: written at the slot after the seal
    reader = await Node(store, node_id=2).start(nursery)
    data = await (await reader.open(0)).read(0, 1 << 20)
    assert _values(data) == [b"v%d" % i for i in range(6)]  # b's data at offsets 3-5, none of a's


async def test_offset_for_timestamp_reads_one_index_span_not_the_segment(store, nursery, monkeypatch):
    """Issue 21: ListOffsets by timestamp uses the sparse index's offset entries, so a large
    segment is not read whole (the gateway used to load it, then look inside)."""
    from kafscale.gateway.log import compaction
    from kafscale.gateway.log.compaction import Compactor

    monkeypatch.setattr(compaction, "INDEX_MIN_BYTES", 0)  # index every segment (8 MiB and up in production)
    node = await Node(store, settings=replace(SETTINGS, segment_bytes=1 << 20, index_interval=20)).start(nursery)
    log = await node.open()
    for i in range(50):
        _, ticket = log.append(*_record_set(n=20, start=i * 20, ts=10_000 + i * 20))
        await ticket.wait()
    await Compactor(_Manager(store, node, [log]), MaintenanceFailures()).pass_once(everything=True)
    segment = next(p for p in log.pieces if p.kind == "segment")

    reads: list[tuple[str, int]] = []
    get_range = store.get_range

    async def counted_get_range(key, start, end):
        reads.append((key, end - start))
        return await get_range(key, start, end)

    monkeypatch.setattr(store, "get_range", counted_get_range)
    # A restart, rebuilding no producer state (which would read the newest segment whole):
    # nothing of the segment is in the cache.
    again = await Node(store, settings=replace(SETTINGS, producer_scan_bytes=0)).start(nursery)
    fresh = await again.open()
    reads.clear()
    assert await offset_for_timestamp(fresh, 10_000 + 777) == (777, 10_777)
    read_of_segment = sum(size for key, size in reads if key == segment.key)
    assert 0 < read_of_segment <= segment.size // 10  # one span of ~20 records out of 1,000
