"""The log cleaner on a running gateway: each key keeps its newest record, offsets never
change, tombstones go after delete.retention.ms, and every reader sees the cleaned log."""

import random
import time

import trio

from devkit.wire_client import Client, create_topic, start_gateway
from devkit.wire_client import fetch as _fetch
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from kafscale.protocol.records import Record, iter_records, split_batches
from kafscale.protocol.segment import read_segment

DAY_MS = 86_400_000


async def _produce(client, topic, records):
    stamped = build_batch(records, base_timestamp=int(time.time() * 1000))
    request = build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[
        dict(name=topic, partition_data=[dict(index=0, records=stamped)])]))
    answer = (await client.call(0, 9, request)).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none, answer.error_message
    return answer.base_offset


async def _read_all(client, topic, start=0):
    """(offset, key, value) of every record a consumer reads from ``start`` on."""
    out, offset = [], start
    while True:
        body = await client.call(1, 12, _fetch(topic, offset, 0, max_bytes=1 << 16, partition_max_bytes=1 << 16))
        partition = body.responses[0].partitions[0]
        assert partition.error_code == ErrorCode.none, partition.error_code
        data = bytes(partition.records or b"")
        if not data:
            assert offset >= partition.high_watermark
            return out
        for header in split_batches(data):
            for record in iter_records(data[header.position:header.position + header.size], header.at(position=0)):
                if record.offset >= offset:
                    out.append((record.offset, record.key, record.value))
            offset = header.last_offset + 1


async def _settle(running, now_ms=None):
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    return await logs.cleaner.pass_once(everything=True, now_ms=now_ms)


def _newest(history):
    newest = {}
    for offset, key, value in history:
        newest[key] = (offset, key, value)
    return newest


async def test_each_key_keeps_its_newest_record_at_its_own_offset(nursery):
    running, _ = await start_gateway(nursery, segment_bytes=4096, max_message_bytes=4096)
    client = await Client.connect(running.port)
    await create_topic(client, "c", cleanup_policy="compact")
    rng = random.Random(7)
    history = []
    for _ in range(60):
        batch = [(b"k%d" % rng.randrange(40), b"v%d" % rng.randrange(10**6)) for _ in range(rng.randrange(1, 12))]
        base = await _produce(client, "c", batch)
        history += [(base + i, key, value) for i, (key, value) in enumerate(batch)]
        if rng.random() < 0.2:
            await running.context.logs.compactor.pass_once(everything=True)
    assert await _settle(running) > 0
    newest = _newest(history)
    assert await _read_all(client, "c") == sorted(newest.values())
    stats = running.context.logs.cleaner.stats
    assert stats.records_removed == len(history) - len(newest) and stats.keys_mapped == len(newest)
    # From any start offset, a consumer reads on across the gaps.
    for start in range(0, len(history), 7):
        assert await _read_all(client, "c", start) == [r for r in sorted(newest.values()) if r[0] >= start]
    # A second pass finds nothing to remove and writes nothing.
    assert await _settle(running) == 0


async def test_tombstones_stay_for_delete_retention_after_the_pass_that_kept_them(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t", cleanup_policy="compact", delete_retention_ms=str(DAY_MS))
    await _produce(client, "t", [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    await _produce(client, "t", [(b"a", None), (b"b", b"2")])
    now = int(time.time() * 1000)
    await _settle(running, now)
    assert await _read_all(client, "t") == [(2, b"c", b"1"), (3, b"a", None), (4, b"b", b"2")]
    await _settle(running, now + DAY_MS - 1)  # not yet
    assert (3, b"a", None) in await _read_all(client, "t")
    logs = running.context.logs
    assert logs.cleaner.progress(logs.loaded()[0]).tombstones_due_ms == now + DAY_MS
    await _settle(running, now + DAY_MS)
    assert await _read_all(client, "t") == [(2, b"c", b"1"), (4, b"b", b"2")]


async def test_a_delete_topic_is_never_cleaned_and_a_switch_to_compact_cleans_it(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "s", cleanup_policy="delete")
    await _produce(client, "s", [(b"a", b"1"), (b"a", b"2"), (None, b"keyless")])
    await _settle(running)
    assert len(await _read_all(client, "s")) == 3
    await running.context.logs.alter_topic_configs("s", {"cleanup.policy": "compact"})
    await _settle(running)
    # Kafka's cleaner drops records without a key, written before the switch.
    assert await _read_all(client, "s") == [(1, b"a", b"2")]


async def test_min_compaction_lag_holds_young_segments(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "m", cleanup_policy="compact", min_compaction_lag_ms="3600000")
    await _produce(client, "m", [(b"a", b"1"), (b"a", b"2")])
    now = int(time.time() * 1000)
    assert await _settle(running, now) == 0
    assert len(await _read_all(client, "m")) == 2
    assert await _settle(running, now + 3_700_000) == 1
    assert await _read_all(client, "m") == [(1, b"a", b"2")]


async def test_lowering_min_compaction_lag_applies_at_once(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "ml", cleanup_policy="compact", min_compaction_lag_ms=str(10**9))
    await _produce(client, "ml", [(b"a", b"1"), (b"a", b"2")])
    logs = running.context.logs
    await _settle(running)  # held back
    await logs.alter_topic_configs("ml", {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
    assert await logs.cleaner.pass_once() == 1  # due now, not when the old lag would have passed
    assert await _read_all(client, "ml") == [(1, b"a", b"2")]


async def test_a_producers_newest_batch_header_survives_cleaning(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "p", cleanup_policy="compact")
    idempotent = build_batch([(b"a", b"1")], producer_id=5, producer_epoch=0, base_sequence=0)
    request = build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[
        dict(name="p", partition_data=[dict(index=0, records=idempotent)])]))
    assert (await client.call(0, 9, request)).responses[0].partition_responses[0].error_code == 0
    await _produce(client, "p", [(b"a", b"2")])
    await _settle(running)
    [piece] = running.context.logs.loaded()[0].pieces
    segment = read_segment(await running.context.logs.store.get(piece.key))
    assert [(b.base_offset, b.records_count, b.producer_id) for b in segment.batches] == [(0, 0, 5), (1, 1, -1)]
    assert await _read_all(client, "p") == [(1, b"a", b"2")]


async def test_records_keep_their_bytes_and_timestamps(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "r", cleanup_policy="compact")
    batch = [Record(0, 1_000, b"a", b"old"), Record(1, 2_000, b"b", None), Record(2, 3_000, b"c", b"x")]
    request = build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[
        dict(name="r", partition_data=[dict(index=0, records=build_batch(batch, base_timestamp=1_000))])]))
    await client.call(0, 9, request)
    await _produce(client, "r", [(b"a", b"new")])
    await _settle(running)
    body = await client.call(1, 12, _fetch("r", 0, 0))
    data = bytes(body.responses[0].partitions[0].records)
    records = [r for h in split_batches(data) for r in iter_records(data[h.position:h.position + h.size],
                                                                        h.at(position=0))]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records[:2]] == [(1, 2_000, b"b", None),
                                                                              (2, 3_000, b"c", b"x")]


async def test_a_cleaner_that_lost_the_partition_before_its_rewrite_publishes_nothing(nursery):
    """Another gateway took the partition over (a newer epoch) after this one mapped the
    keys: every rewrite is asked of ownership first, so nothing is written."""
    from kafscale.gateway.log.cleaner import CleanerStats, Progress, clean

    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "o", cleanup_policy="compact")
    for i in range(5):
        await _produce(client, "o", [(b"a", b"%d" % i), (b"b", b"%d" % i)])
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    partition_log = logs.loaded()[0]
    store = partition_log.store
    writes = []
    original_get, original_put = store.get_versioned, store.put_if_unchanged

    async def get_versioned(key):
        partition_log._owned_epoch = lambda: partition_log.epoch + 1  # taken over, under a newer epoch
        return await original_get(key)

    async def put_if_unchanged(key, data, version):
        writes.append(key)
        return await original_put(key, data, version)

    store.get_versioned, store.put_if_unchanged = get_versioned, put_if_unchanged
    policy = logs.policy(logs.topics()["o"])
    progress = Progress()
    assert await clean(partition_log, progress, policy, 1 << 20, CleanerStats()) == 0
    assert writes == [] and progress.cleaned_end == 0  # the next owner cleans it from the start
    assert len(await _read_all(client, "o")) == 10


async def test_retention_deletes_only_under_the_delete_policy(nursery):
    """compact: nothing is deleted by age; compact,delete: old segments go by age too."""
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    logs = running.context.logs
    for name, policy in (("only", "compact"), ("both", "compact,delete")):
        await create_topic(client, name, cleanup_policy=policy, retention_ms="1000")
        for i in range(3):
            old = build_batch([Record(0, 1_000 + i, b"k%d" % i, b"v")])  # timestamps from 1970
            request = build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[
                dict(name=name, partition_data=[dict(index=0, records=old)])]))
            await client.call(0, 9, request)
            await logs.compactor.pass_once(everything=True)  # one segment each
    assert await logs.enforce_retention() == 2  # the two older segments of "both"; the newest piece stays
    assert len(await _read_all(client, "only")) == 3
    assert logs.loaded_log("both", 0).log_start_offset == 2
    assert await _read_all(client, "both", 2) == [(2, b"k2", b"v")]


async def test_list_offsets_answers_on_the_cleaned_log(nursery):
    """Earliest stays the log start, latest the high watermark; a timestamp whose record
    was cleaned away answers the next record's offset."""
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "lo", cleanup_policy="compact")
    for i, key in enumerate([b"a", b"b", b"a", b"c"]):  # offset 0 (a, t=1000) is superseded by offset 2
        batch = build_batch([Record(0, 1_000 * (i + 1), key, b"%d" % i)])
        await client.call(0, 9, build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000,
                                                                 topic_data=[dict(name="lo", partition_data=[
                                                                     dict(index=0, records=batch)])])))
    await _settle(running)
    assert [offset for offset, _, _ in await _read_all(client, "lo")] == [1, 2, 3]

    async def list_offset(timestamp):
        body = await client.call(2, 7, build(request_class(2, 7), dict(replica_id=-1, isolation_level=0, topics=[
            dict(name="lo", partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])])))
        return body.topics[0].partitions[0].offset

    assert await list_offset(-2) == 0  # earliest: the log start, as Kafka's (its first segment's base)
    assert await list_offset(-1) == 4
    assert await list_offset(500) == 1  # the record at t=1000 is gone: the next one
    assert await list_offset(3_000) == 2


async def test_a_restarted_gateway_cleans_on_from_its_checkpoint(nursery, tmp_path):
    """How far a partition is clean survives a restart (cleaner-checkpoint.json): the next
    owner maps only what was written since, not the whole partition again."""
    running, shutdown = await start_gateway(nursery, storage=str(tmp_path / "data"))
    client = await Client.connect(running.port)
    await create_topic(client, "ck", cleanup_policy="compact")
    for i in range(6):
        await _produce(client, "ck", [(b"k%d" % (j % 5), b"first-%d-%d" % (i, j)) for j in range(50)])
        await running.context.logs.compactor.pass_once(everything=True)
    await _settle(running)
    logs = running.context.logs
    assert logs.cleaner.progress(logs.loaded()[0]).cleaned_end == 300
    shutdown.set()
    await trio.sleep(0.2)
    again, _ = await start_gateway(nursery, storage=str(tmp_path / "data"))
    client = await Client.connect(again.port)
    await _produce(client, "ck", [(b"k0", b"newest")])
    await _settle(again)
    stats = again.context.logs.cleaner.stats
    partition_log = again.context.logs.loaded()[0]
    assert again.context.logs.cleaner.progress(partition_log).cleaned_end == 301
    assert stats.bytes_read == partition_log.pieces[-1].size  # only the new segment was mapped
    assert await _read_all(client, "ck") == [(296, b"k1", b"first-5-46"), (297, b"k2", b"first-5-47"),
                                             (298, b"k3", b"first-5-48"), (299, b"k4", b"first-5-49"),
                                             (300, b"k0", b"newest")]


async def test_a_damaged_segment_is_never_rewritten_and_stops_the_pass_before_it(nursery, tmp_path):
    """A bit flipped in the second of three segments: the first is cleaned, the damaged one
    and everything after it are left as they are (a tombstone after damage must not go
    while an older value may hide in the damaged part), and nothing crashes."""
    data = tmp_path / "data"
    running, _ = await start_gateway(nursery, storage=str(data))
    client = await Client.connect(running.port)
    await create_topic(client, "dm", cleanup_policy="compact", delete_retention_ms="0")
    logs = running.context.logs
    for values in ([(b"a", b"1"), (b"a", b"2")], [(b"b", b"damaged-%d" % i) for i in range(3)],
                   [(b"a", None), (b"b", b"3")]):
        await _produce(client, "dm", values)
        await logs.compactor.pass_once(everything=True)
    [_, middle, _] = sorted(data.rglob("dm/0/segment-*.kfs"))
    raw = bytearray(middle.read_bytes())
    raw[raw.index(b"damaged-1") + 3] ^= 0x01
    middle.write_bytes(bytes(raw))
    partition_log = logs.loaded()[0]
    partition_log.cache.discard_prefix("")  # the next reads see the damage
    before = {p.name: p.read_bytes() for p in sorted(data.rglob("dm/0/segment-*.kfs"))}
    rewritten = await logs.cleaner.pass_once(everything=True)
    after = {p.name: p.read_bytes() for p in sorted(data.rglob("dm/0/segment-*.kfs"))}
    first = sorted(before)[0]
    assert rewritten == 1 and [name for name in before if before[name] != after[name]] == [first]
    assert logs.cleaner.stats.errors == 0 and len(running.context.logs.damage) == 1
    # a: 1 went (superseded within the mapped part); at the damage consumers get CORRUPT_MESSAGE, as before.
    body = await client.call(1, 12, _fetch("dm", 0, 0))
    records = bytes(body.responses[0].partitions[0].records)
    assert [(r.offset, r.value) for h in split_batches(records)
            for r in iter_records(records[h.position:h.position + h.size], h.at(position=0))] == [(1, b"2")]
    body = await client.call(1, 12, _fetch("dm", 2, 0))
    assert body.responses[0].partitions[0].error_code == ErrorCode.corrupt_message


async def test_a_key_map_smaller_than_one_batch_still_advances(nursery):
    """Issue 38 item 16: with the smallest dedupe buffer (64 KiB, ~1,536 keys) a batch of more
    distinct keys was never got past: endless passes, nothing removed, no error."""
    running, _ = await start_gateway(nursery, cleaner_dedupe_buffer_bytes=64 * 1024)
    client = await Client.connect(running.port)
    await create_topic(client, "wide", cleanup_policy="compact")
    for round_ in range(2):  # 5,000 keys, twice: the first round is all superseded
        await _produce(client, "wide", [Record(i, 0, b"key-%05d" % i, b"round-%d" % round_) for i in range(5000)])
    await _produce(client, "wide", [Record(0, 0, b"last", b"x")])  # the log's last batch stays whole
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    capacity = None
    for _ in range(20):  # each pass maps as far as its map holds, and cleans up to there
        await logs.cleaner.pass_once(everything=True)
        capacity = logs.cleaner.stats.keys_mapped
        if len(await _read_all(client, "wide")) == 5001:
            break
    history = await _read_all(client, "wide")
    assert [value for _, _, value in history[:-1]] == [b"round-1"] * 5000  # every key's newest only
    assert capacity is not None and capacity < 5000  # several passes did it, none of them stalled
    assert logs.cleaner.stats.stalled_passes == 0 and logs.cleaner.stats.errors == 0
