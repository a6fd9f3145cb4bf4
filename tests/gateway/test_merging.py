"""Merging small segments: the policy, the rewrite, and what a killed or stale merger leaves."""

import pytest
import trio

from kafscale.gateway.log.compaction import compact
from kafscale.gateway.log.merging import MERGE_MIN, delete_redundant, merge, merge_run
from kafscale.gateway.log.timestamps import offset_for_timestamp
from kafscale.gateway.storage import AsyncStore
from kafscale.protocol.index import SegmentIndex
from kafscale.protocol.layout import index_key, parse_segment_key, segment_key
from kafscale.protocol.log_view import SEGMENT, Piece
from kafscale.protocol.records import restamp
from kafscale.protocol.segment import SegmentBuilder, read_segment
from kafscale.storage_backends import LocalBackend, MemoryBackend, StorageUnavailable

from .test_shared_log import Node, _record_set, _values, write_previous_format


@pytest.fixture(params=["memory", "local"])
def store(request, tmp_path):
    backend = MemoryBackend() if request.param == "memory" else LocalBackend(tmp_path / "d")
    return AsyncStore(backend, 4)


def _segment(base, size, last=None):
    return Piece(SEGMENT, segment_key("ns", "t", 0, base), base, base + 9 if last is None else last, size)


def test_the_first_run_of_one_size_tier_is_merged():
    small = [_segment(i * 10, 1000) for i in range(6)]
    assert merge_run(small, 0, 1 << 20) == small
    assert merge_run(small[:MERGE_MIN - 1], 0, 1 << 20) is None  # too few to be worth a rewrite
    # A segment four times larger is another tier: it ends the run (and starts no run of its own).
    mixed = [*small[:3], _segment(30, 5000), *[_segment(40 + i * 10, 1000) for i in range(4)]]
    assert merge_run(mixed, 0, 1 << 20) == mixed[4:]
    # Below the log start (retention deletes it) or past segment.bytes: not merged.
    assert merge_run(small, 15, 1 << 20) == small[2:]
    assert merge_run(small, 0, 4500) == small[:4]
    # Only consecutive offsets: a gap (segments of another partition listing, a hole) ends a run.
    assert merge_run([*small[:3], _segment(35, 1000), *small[4:]], 0, 1 << 20) is None
    # Large segments (more than half of segment.bytes) are never merged.
    assert merge_run([_segment(i * 10, 3000) for i in range(6)], 0, 5000) is None


async def _small_segments(store, nursery, count=6):
    """A node whose partition holds ``count`` small segments of 3 records each."""
    node = await Node(store).start(nursery)
    log = await node.open()
    for i in range(count):
        _, ticket = log.append(*_record_set(start=i * 3, ts=1000 + 10 * i))
        await ticket.wait()
        assert await compact(log)
    assert [p.kind for p in log.pieces] == [SEGMENT] * count
    return node, log


async def _segment_keys(store):
    return [i.key for i in await store.list("ns/t/0/") if parse_segment_key(i.key) is not None]


async def test_a_merge_rewrites_the_first_segment_and_deletes_the_others(store, nursery):
    node, log = await _small_segments(store, nursery)
    assert await merge(log) == 6
    assert await _segment_keys(store) == [segment_key("ns", "t", 0, 0)]
    assert [(p.kind, p.base_offset, p.last_offset) for p in log.pieces] == [(SEGMENT, 0, 17)]
    merged = read_segment(await store.get(segment_key("ns", "t", 0, 0)))
    assert (merged.base_offset, merged.last_offset, merged.header.batch_count) == (0, 17, 6)
    # Under INDEX_MIN_BYTES a segment has no index object (a second PUT for what a reader scans whole).
    assert not [i for i in await store.list("ns/t/0/") if i.key.endswith(".index")]
    expected = [b"v%d" % i for i in range(18)]
    assert _values(await log.read(0, 1 << 20)) == expected
    assert _values(await log.read(7, 1 << 20)) == expected[6:]
    assert await offset_for_timestamp(log, 1041) == (13, 1041)
    assert await merge(log) == 0  # one segment: nothing more to do
    # Another run of the gateway sees the same log, and goes on after it.
    again = await Node(store).start(nursery)
    log2 = await again.open()
    assert (log2.log_start_offset, log2.high_watermark, log2.redundant) == (0, 18, [])
    assert _values(await log2.read(0, 1 << 20)) == expected
    assert await offset_for_timestamp(log2, 1050) == (15, 1050)
    offset, ticket = log2.append(*_record_set(start=18))
    await ticket.wait()
    assert offset == 18


async def test_a_merge_killed_before_its_deletes_leaves_redundant_segments(store, nursery):
    """The rewrite landed, the deletes did not: readers drop the contained segments, the
    owner deletes them, and nothing is lost or read twice."""
    node, log = await _small_segments(store, nursery)

    async def killed(keys):
        raise StorageUnavailable("killed")

    store.delete_many = killed
    with pytest.raises(StorageUnavailable):
        await merge(log)
    del store.delete_many
    assert len(await _segment_keys(store)) == 6
    again = await Node(store).start(nursery)
    log2 = await again.open()
    assert [(p.base_offset, p.last_offset) for p in log2.pieces] == [(0, 17)]
    assert [s.base_offset for s in log2.redundant] == [3, 6, 9, 12, 15]
    assert _values(await log2.read(0, 1 << 20)) == [b"v%d" % i for i in range(18)]
    assert await delete_redundant(log2) == 5
    assert await _segment_keys(store) == [segment_key("ns", "t", 0, 0)]


async def test_a_merger_that_lost_the_race_changes_nothing(store, nursery):
    """Two mergers of one partition (a former owner paused mid-merge and the new one): the
    rewrite is conditional, so the one that read an older version of the first segment gives up,
    and a late delete removes only segments contained in the first one."""
    node, stale = await _small_segments(store, nursery)
    newer = await (await Node(store).start(nursery)).open()
    real_get = store.get_versioned

    async def others_merge_in_between(key):
        found = await real_get(key)
        store.get_versioned = real_get
        assert await merge(newer) == 6  # lands between the stale merger's read and its rewrite
        return found

    store.get_versioned = others_merge_in_between
    assert await merge(stale) == 0
    assert await _segment_keys(store) == [segment_key("ns", "t", 0, 0)]
    reader = await (await Node(store).start(nursery)).open()
    assert _values(await reader.read(0, 1 << 20)) == [b"v%d" % i for i in range(18)]
    # The stale gateway's view still names the deleted segments: its reads find the merged one.
    assert _values(await stale.read(4, 1 << 20)) == [b"v%d" % i for i in range(3, 18)]


async def test_a_merge_gives_up_when_a_segment_it_read_changed_before_it_wrote(store, nursery):
    """A former owner's cleaner rewrote one of the run while this merge read the others: the
    merge would pair two moments of the log, so it writes nothing."""
    node, log = await _small_segments(store, nursery)
    real_get = store.get_versioned
    second = segment_key("ns", "t", 0, 3)

    async def rewritten_meanwhile(key):
        found = await real_get(key)
        if key == segment_key("ns", "t", 0, 9):  # the third of the run read: the second one changes
            data, version = await real_get(second)
            await store.put_if_unchanged(second, data, version)  # the same bytes, a new version
        return found

    store.get_versioned = rewritten_meanwhile
    before = {key: await store.version(key) for key in await _segment_keys(store)}
    assert await merge(log) == 0
    del store.get_versioned
    assert {key: await store.version(key) for key in await _segment_keys(store) if key != second} == \
        {key: version for key, version in before.items() if key != second}  # nothing else written
    assert await merge(log) == 6  # read again, one moment: merged
    assert _values(await log.read(0, 1 << 20)) == [b"v%d" % i for i in range(18)]


async def test_a_late_copy_inside_a_merged_segment_is_ignored(store, nursery):
    """A former owner's compaction PUT landing after the merge deleted that key (put-if-absent
    then succeeds): the copy holds fewer offsets than the gap to the next segment, which a
    reader must not take for the whole gap."""
    node, log = await _small_segments(store, nursery)
    assert await merge(log) == 6
    late = SegmentBuilder(6)
    batch, headers = _record_set(start=6, ts=1020)
    late.append(batch, restamp(batch, headers, 6))
    await store.put_if_absent(segment_key("ns", "t", 0, 6), late.seal(0))
    reader = await (await Node(store).start(nursery)).open()
    assert [s.base_offset for s in reader.redundant] == [6]
    assert _values(await reader.read(0, 1 << 20)) == [b"v%d" % i for i in range(18)]


async def test_segments_of_the_previous_format_are_merged(store, nursery):
    """Before shared log objects every flush wrote a segment per partition: many small ones,
    merged in segment.bytes runs."""
    await write_previous_format(store, 40)
    node = await Node(store).start(nursery)
    log = await node.open()
    while await merge(log):
        await trio.lowlevel.checkpoint()
    assert len(await _segment_keys(store)) == 1
    assert _values(await log.read(0, 1 << 20)) == [b"v%d" % i for i in range(120)]


async def test_a_merged_segment_over_the_index_threshold_gets_its_index(store, nursery, monkeypatch):
    from kafscale.gateway.log import merging

    monkeypatch.setattr(merging, "INDEX_MIN_BYTES", 0)  # these small segments count as large here
    node, log = await _small_segments(store, nursery)
    assert await merge(log) == 6
    index = SegmentIndex.decode(await store.get(index_key("ns", "t", 0, 0)))
    assert index.describes(log.pieces[0].size) and index.max_timestamp == 1052
    assert [i.key for i in await store.list("ns/t/0/") if i.key.endswith(".index")] == [index_key("ns", "t", 0, 0)]
