"""Damaged stored data, as a disk, an operator or a bad copy leaves it (issue 20 items 9-12):
a gateway restarted over it starts, serves everything intact, answers CORRUPT_MESSAGE exactly
where data is lost (never skipping it silently), and reports the damage. In-process gateways
over the filesystem backend; the damage is done to the files themselves."""

from __future__ import annotations

import struct
from pathlib import Path

import trio

from devkit.wire_client import Client
from devkit.wire_client import fetch as _fetch
from devkit.wire_client import produce as _produce
from devkit.wire_client import start_gateway as _start
from kafscale.gateway.http import readiness
from kafscale.protocol import ErrorCode, build_batch, iter_records, split_batches
from kafscale.protocol.entities import build
from kafscale.protocol.log_object import LOG_OBJECT_FOOTER_SIZE
from kafscale.protocol.messages import request_class

BATCHES = 3  # of 10 records each: offsets 0-9, 10-19, 20-29


async def _write(nursery, tmp_path: Path, topic: str, *, compact: bool) -> None:
    """A gateway run that stores BATCHES produce requests, each its own flush, then stops."""
    running, shutdown = await _start(nursery, storage=f"file://{tmp_path}", fsync=False, linger_ms=0)
    client = await Client.connect(running.port)
    for b in range(BATCHES):
        batch = build_batch([(None, b"value-%02d" % (b * 10 + i)) for i in range(10)])
        answer = await client.call(0, 9, _produce(topic, batch), correlation_id=b)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    if compact:
        await running.context.logs.compactor.pass_once(everything=True)
    shutdown.set()
    with trio.fail_after(10):
        while running.context.ready:
            await trio.sleep(0.01)


def _flip(path: Path, needle: bytes) -> None:
    data = bytearray(path.read_bytes())
    where = data.index(needle)
    data[where + len(needle) - 1] ^= 0x01
    path.write_bytes(bytes(data))


def _files(tmp_path: Path, suffix: str) -> list[Path]:
    return sorted(p for p in tmp_path.rglob(f"*{suffix}") if p.stat().st_size > 0)


async def _read_all(client: Client, topic: str, high_watermark: int) -> tuple[list[bytes], dict[int, int]]:
    """Every value a consumer can read, seeking past offsets that answer an error (as a
    consumer handling CORRUPT_MESSAGE does); and those errors by offset."""
    values, errors, offset = [], {}, 0
    while offset < high_watermark:
        answer = (await client.call(1, 12, _fetch(topic, offset, max_wait_ms=0))).responses[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            errors[offset] = answer.error_code
            offset += 1
            continue
        data = bytes(answer.records or b"")
        assert data, f"no records and no error at {offset}"
        for header in split_batches(data):
            for record in iter_records(data, header):
                if record.offset >= offset:
                    values.append(record.value)
                    offset = record.offset + 1
    return values, errors


def _expected(lost: range = range(0)) -> list[bytes]:
    return [b"value-%02d" % i for i in range(BATCHES * 10) if i not in lost]


async def test_a_torn_newest_log_object_does_not_stop_the_gateway(nursery, tmp_path):
    """Item 9: truncated by one byte, start-up fencing put its seal in that slot, read it
    back and the format error escaped (exit 1, every time)."""
    await _write(nursery, tmp_path, "t", compact=False)
    newest = _files(tmp_path, ".kfl")[-1]
    newest.write_bytes(newest.read_bytes()[:-1])
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    values, errors = await _read_all(client, "t", 20)
    assert values == _expected(range(20, 30)) and errors == {}  # never acknowledged: not served
    answer = await client.call(0, 9, _produce("t", build_batch([(None, b"after")])))
    assert answer.responses[0].partition_responses[0].base_offset == 20
    assert len(running.context.logs.damage) >= 1
    ok, reason = await readiness(running.context)
    assert ok and "damaged" in reason


async def test_a_damaged_older_log_object_is_an_error_at_its_offsets_not_a_gap(nursery, tmp_path):
    """Item 11: a flipped directory byte of a log object that was not its writer's newest
    made consumers skip offsets 10-19 with no error."""
    await _write(nursery, tmp_path, "t", compact=False)
    data_objects = [p for p in _files(tmp_path, ".kfl") if b"value-" in p.read_bytes()]
    middle = data_objects[1]
    raw = bytearray(middle.read_bytes())
    (directory_pos,) = struct.unpack_from(">Q", raw, len(raw) - LOG_OBJECT_FOOTER_SIZE)
    raw[directory_pos + 40] ^= 0x01
    middle.write_bytes(bytes(raw))
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    values, errors = await _read_all(client, "t", 30)
    assert values == _expected(range(10, 20))
    assert errors == {offset: ErrorCode.corrupt_message for offset in range(10, 20)}
    assert len(running.context.logs.damage) >= 1
    # Compaction goes on around the lost range instead of failing each pass.
    await running.context.logs.compactor.pass_once(everything=True)
    assert running.context.logs.compactor.errors == 0
    values, errors = await _read_all(client, "t", 30)
    assert values == _expected(range(10, 20)) and set(errors) == set(range(10, 20))


async def _one_damaged_record(nursery, tmp_path, suffix: str, compact: bool):
    await _write(nursery, tmp_path, "t", compact=compact)
    (target,) = [p for p in _files(tmp_path, suffix) if b"value-15" in p.read_bytes()]
    _flip(target, b"value-15")
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    values, errors = await _read_all(client, "t", 30)
    assert values == _expected(range(10, 20))  # everything intact is served, before and after
    assert errors == {offset: ErrorCode.corrupt_message for offset in range(10, 20)}
    ok, reason = await readiness(running.context)
    assert ok and "damaged" in reason
    assert running.context.metrics.registry.get_sample_value("kafscale_damaged_objects") >= 1
    # Compaction goes on around the damaged batch (it does not fail every pass), what it
    # could not read stays lost in the same place, and the damaged object is kept.
    compactor = running.context.logs.compactor
    await compactor.pass_once(everything=True)
    assert compactor.errors == 0
    assert target.exists()
    values, errors = await _read_all(client, "t", 30)
    assert values == _expected(range(10, 20)) and set(errors) == set(range(10, 20))


async def test_one_damaged_record_in_a_log_object_hides_only_its_batch(nursery, tmp_path):
    """Item 12: a flipped byte in one record of a .kfl entry made every Fetch of the
    partition, from any offset, answer KAFKA_STORAGE_ERROR (retriable) forever."""
    await _one_damaged_record(nursery, tmp_path, ".kfl", compact=False)


async def test_one_damaged_record_in_a_segment_hides_only_its_batch(nursery, tmp_path):
    await _one_damaged_record(nursery, tmp_path, ".kfs", compact=True)


async def test_a_truncated_segment_keeps_its_intact_batches(nursery, tmp_path):
    """Item 12: a truncated segment was set aside whole, its intact first half discarded."""
    await _write(nursery, tmp_path, "t", compact=True)
    (segment,) = _files(tmp_path, ".kfs")
    raw = segment.read_bytes()
    segment.write_bytes(raw[:raw.index(b"value-25")])  # the last batch cut in two, footer gone
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    partition_log = await running.context.logs.get("t", 0)
    assert partition_log.high_watermark == 30  # 20-29 are still in the newest log object
    values, errors = await _read_all(client, "t", 30)
    assert values == _expected() and errors == {}
    assert (segment.parent / (segment.name + ".torn")).exists()
    repaired = segment.read_bytes()  # written again with the batches that were intact
    assert b"value-00" in repaired and b"value-19" in repaired and b"value-2" not in repaired


def _commit(group: str, offset: int):
    return build(request_class(8, 8), dict(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                            group_instance_id=None, topics=[dict(name="t", partitions=[dict(
                                                partition_index=0, committed_offset=offset,
                                                committed_leader_epoch=-1, committed_metadata=None)])]))


def _fetch_offsets(group: str):
    return build(request_class(9, 8), dict(groups=[dict(group_id=group, topics=[dict(
        name="t", partition_indexes=[0])])], require_stable=False))


async def test_one_damaged_group_file_isolates_that_group_only(nursery, tmp_path):
    """Item 10: a flipped byte, '{not json' or '[]' in one group's file stopped the gateway
    from starting. That group is refused now (its stored offsets are neither reset nor
    overwritten); the others are served."""
    running, shutdown = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    await client.call(0, 9, _produce("t", build_batch([(None, b"x")])))  # the topic exists
    for i, group in enumerate(["good", "flipped", "not-json", "list"]):
        answer = await client.call(8, 8, _commit(group, 10 + i), correlation_id=i)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    shutdown.set()
    with trio.fail_after(10):
        while running.context.ready:
            await trio.sleep(0.01)
    groups = tmp_path / "kafscale" / "~meta" / "groups"
    _flip(groups / (b"flipped".hex() + ".json"), b'"flipped"')
    (groups / (b"not-json".hex() + ".json")).write_bytes(b"{not json")
    (groups / (b"list".hex() + ".json")).write_bytes(b"[]")
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    answer = (await client.call(9, 8, _fetch_offsets("good"))).groups[0]
    assert answer.error_code == ErrorCode.none and answer.topics[0].partitions[0].committed_offset == 10
    for group in ["flipped", "not-json", "list"]:
        answer = (await client.call(9, 8, _fetch_offsets(group))).groups[0]
        assert answer.error_code == ErrorCode.coordinator_not_available, group
        refused = await client.call(8, 8, _commit(group, 99))
        assert refused.topics[0].partitions[0].error_code == ErrorCode.coordinator_not_available
        for version in (0, 1):  # item 14: no top-level error before v2, so each partition carries it
            old = build(request_class(9, version), dict(group_id=group, topics=[dict(name="t", partition_indexes=[0])]))
            (partition,) = (await client.call(9, version, old)).topics[0].partitions
            assert (partition.committed_offset, partition.error_code) == (-1, ErrorCode.coordinator_not_available)
    assert (groups / (b"not-json".hex() + ".json")).read_bytes() == b"{not json"  # left for repair
    assert running.context.metrics.registry.get_sample_value("kafscale_damaged_groups") == 3
    ok, reason = await readiness(running.context)
    assert ok and "3 group(s) not served" in reason
    # Each damaged group names the object to repair or remove (ids may be named by digest).
    key = "kafscale/~meta/groups/" + b"not-json".hex() + ".json"
    assert running.context.groups.damaged["not-json"].startswith(key)


async def test_a_truncated_cleaned_segment_keeps_its_intact_batches_across_gaps(nursery, tmp_path):
    """Issue 38 item 15: the repair walked offsets and stopped at the first gap, and a cleaned
    segment is full of gaps: every key's newest value after the first gap vanished, silently."""
    running, shutdown = await _start(nursery, storage=f"file://{tmp_path}", fsync=False, linger_ms=0)
    client = await Client.connect(running.port)
    body = await client.call(19, 5, build(request_class(19, 5), dict(topics=[dict(
        name="c", num_partitions=1, replication_factor=1, assignments=[],
        configs=[dict(name="cleanup.policy", value="compact"), dict(name="min.cleanable.dirty.ratio", value="0.01")])],
        timeout_ms=5000, validate_only=False)))
    assert body.topics[0].error_code == ErrorCode.none
    # 20 keys written 5 times each: cleaning keeps each key's newest, gaps everywhere before.
    for round_ in range(5):
        batch = build_batch([(b"k%02d" % i, b"v%d-%02d" % (round_, i)) for i in range(20)])
        answer = await client.call(0, 9, _produce("c", batch), correlation_id=round_)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    for i in range(6):  # more batches of new keys, in the same segment after the cleaned part
        batch = build_batch([(b"n%02d" % i, b"new-%02d" % i)])
        await client.call(0, 9, _produce("c", batch), correlation_id=10 + i)
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    await logs.cleaner.pass_once(everything=True)
    await logs.compactor.pass_once(everything=True)
    shutdown.set()
    with trio.fail_after(10):
        while running.context.ready:
            await trio.sleep(0.01)
    segments = _files(tmp_path, ".kfs")
    cleaned = [s for s in segments if b"v4-00" in s.read_bytes()]
    assert len(cleaned) == 1, segments
    raw = cleaned[0].read_bytes()
    assert b"v0-00" not in raw  # cleaned: the gaps are there
    cleaned[0].write_bytes(raw[:raw.index(b"new-05")])  # the last batch cut in two, footer gone
    running, _ = await _start(nursery, storage=f"file://{tmp_path}", fsync=False)
    client = await Client.connect(running.port)
    partition_log = await running.context.logs.get("c", 0)
    high = partition_log.high_watermark
    values, errors = await _read_all(client, "c", high)
    # Every newest value before the cut is served; the cut batch is served from the newest
    # log object, where it still is, or answers CORRUPT_MESSAGE: never skipped silently.
    assert [v for v in values if v.startswith(b"v")] == [b"v4-%02d" % i for i in range(20)]
    news = [v for v in values if v.startswith(b"new")]
    assert news == [b"new-%02d" % i for i in range(5 + (not errors))]
    assert set(errors.values()) <= {ErrorCode.corrupt_message} and len(errors) <= 1
