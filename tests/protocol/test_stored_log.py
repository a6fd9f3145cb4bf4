"""The sans-io reader of the stored log, driven here by a plain dict of objects: what it asks
for, and what it makes of torn, deleted and racing objects."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol import stored_log as reads
from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.layout import log_object_key, partition_prefix, segment_key
from kafscale.protocol.log_object import LogObjectBuilder
from kafscale.protocol.records import build_batch, restamp, split_batches
from kafscale.protocol.segment import SegmentBuilder

PREFIX = partition_prefix("ns", "t", 0)


def _segment(base, count):
    builder = SegmentBuilder(base)
    buffer = bytearray(build_batch([(None, b"v%d" % i) for i in range(count)]))
    builder.append(buffer, restamp(buffer, split_batches(buffer), base))
    return bytes(builder.seal(1))


def _log_object(sequence, base, count, padding=0):
    builder = LogObjectBuilder()
    buffer = bytearray(build_batch([(None, b"x" * padding) for _ in range(count)]))
    builder.append("t", 0, buffer, restamp(buffer, split_batches(buffer), base))
    return builder.encode(log_object_key("ns", "0-ab", sequence), sequence, 1)


class Drive:
    """A driver over ``objects`` that records every step; ``between`` runs after each step
    (a store changing under the reader)."""

    def __init__(self, objects, between=lambda step: None):
        self.objects = objects
        self.steps = []
        self.between = between

    def run(self, reader):
        answers = None
        while True:
            try:
                step = reader.send(answers)
            except StopIteration as done:
                return done.value
            self.steps.append(step)
            answers = [self.answer(read) for read in step]
            self.between(step)

    def answer(self, read):
        if isinstance(read, reads.ListObjects):
            return sorted((k, len(v)) for k, v in self.objects.items() if k.startswith(read.prefix))
        if isinstance(read, reads.ReadRange):
            data = self.objects.get(read.key)
            return reads.MISSING if data is None else data[read.start:read.end]
        if isinstance(read, reads.ReadObject):
            return self.objects.get(read.key, reads.MISSING)
        return []  # RepairTorn: a reader that only skips


def test_segments_are_listed_with_last_offsets_from_their_footers_in_one_step():
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5), segment_key("ns", "t", 0, 5): _segment(5, 3),
               PREFIX + "segment-00000000000000000000.index": b"ignored"}
    drive = Drive(objects)
    listing = drive.run(reads.list_segments(PREFIX))
    assert [(s.base_offset, s.last_offset) for s in listing.segments] == [(0, 4), (5, 7)]
    assert listing.torn == []
    assert [len(step) for step in drive.steps] == [1, 2]  # one listing, then both footers together


def test_a_torn_segment_is_reported_and_a_deleted_one_is_left_out():
    whole = _segment(10, 2)
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5)[:-3], segment_key("ns", "t", 0, 5): _segment(5, 5),
               segment_key("ns", "t", 0, 10): whole}

    def delete_during_footer_reads(step):
        if isinstance(step[0], reads.ListObjects):
            objects.pop(segment_key("ns", "t", 0, 5))

    listing = Drive(objects, delete_during_footer_reads).run(reads.list_segments(PREFIX))
    assert [(s.base_offset, s.last_offset) for s in listing.segments] == [(10, 11)]
    assert listing.torn == [(0, segment_key("ns", "t", 0, 0))]


def test_known_last_offsets_are_not_read_again():
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5)}
    drive = Drive(objects)
    listing = drive.run(reads.list_segments(PREFIX, lambda key, size: 4))
    assert listing.segments[0].last_offset == 4
    assert len(drive.steps) == 1  # the listing only


def test_a_snapshot_lists_again_when_a_merge_raced_the_listing():
    # Listed: 0 (0..4), 5 (5..7), 8 (8..9). Before the footers are read, 5 is merged into 0
    # (rewritten larger at its key) and deleted: 0's footer is read where its old end was and
    # looks torn, 5 is gone. Nothing is torn or missing: the next listing sees the merge.
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5), segment_key("ns", "t", 0, 5): _segment(5, 3),
               segment_key("ns", "t", 0, 8): _segment(8, 2)}
    merged = []

    def merge_after_the_first_listing(step):
        if isinstance(step[0], reads.ListObjects) and not merged:
            merged.append(True)
            objects[segment_key("ns", "t", 0, 0)] = _segment(0, 8)
            del objects[segment_key("ns", "t", 0, 5)]

    drive = Drive(objects, merge_after_the_first_listing)
    view = drive.run(reads.snapshot(PREFIX, [], 0))
    assert view.holes == () and (view.log_start, view.high_watermark) == (0, 10)
    assert not any(isinstance(read, reads.RepairTorn) for step in drive.steps for read in step)


def test_a_snapshot_keeps_holes_no_listing_can_fill():
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5), segment_key("ns", "t", 0, 9): _segment(9, 1)}
    drive = Drive(objects)
    view = drive.run(reads.snapshot(PREFIX, [], 0))
    assert view.holes == ((5, 8),)
    assert sum(isinstance(step[0], reads.ListObjects) for step in drive.steps) == reads.LISTINGS


def test_a_segment_torn_in_two_listings_is_handed_to_the_owner_for_repair():
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 5)[:-1], segment_key("ns", "t", 0, 5): _segment(5, 1)}
    drive = Drive(objects)
    view = drive.run(reads.snapshot(PREFIX, [], 0))
    repairs = [read for step in drive.steps for read in step if isinstance(read, reads.RepairTorn)]
    assert repairs == [reads.RepairTorn(((0, segment_key("ns", "t", 0, 0)),))]
    assert sum(isinstance(step[0], reads.ListObjects) for step in drive.steps) == 2
    assert view.log_start == 5  # the driver repaired nothing: readers skip a torn segment


def test_segments_holding_a_deleted_pieces_offsets():
    objects = {segment_key("ns", "t", 0, 0): _segment(0, 8), segment_key("ns", "t", 0, 8): _segment(8, 2)}
    holding = Drive(objects).run(reads.segments_holding(PREFIX, 5, 7))
    assert [s.key for s in holding] == [segment_key("ns", "t", 0, 0)]
    assert Drive(objects).run(reads.segments_holding(PREFIX, 9, 12)) == []  # 10..12 are nowhere


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 10, 70_000]), min_size=1, max_size=6), torn=st.data())
def test_gathered_directories_equal_each_one_read_alone(sizes, torn):
    objects = {}
    for sequence, padding in enumerate(sizes):
        data, _ = _log_object(sequence, 0, 3, padding)
        if torn.draw(st.booleans(), label=f"tear {sequence}"):
            data = data[:-5]
        objects[log_object_key("ns", "0-ab", sequence)] = data
    listed = Drive(objects).run(reads.list_log_objects("ns"))
    drive = Drive(objects)
    together = drive.run(reads.gather(reads.read_directory(key, size) for key, size in listed))
    for (key, size), found in zip(listed, together, strict=True):
        try:
            alone = Drive(objects).run(reads.read_directory(key, size))
        except SegmentFormatError as exc:
            alone = exc
        assert type(found) is type(alone)
        if not isinstance(found, SegmentFormatError):
            assert found.entries == alone.entries
    assert len(drive.steps) <= 2  # every tail in one step, the few long directories in one more


def test_a_directory_of_an_object_deleted_meanwhile_is_none():
    data, _ = _log_object(0, 0, 3)
    assert Drive({}).run(reads.read_directory(log_object_key("ns", "0-ab", 0), len(data))) is None


def _timed_segment(timestamps, per_batch, interval):
    """A segment of batches of ``per_batch`` records with these timestamps, and its index."""
    from kafscale.protocol.index import build_index
    from kafscale.protocol.records import Record

    builder = SegmentBuilder(0)
    for first in range(0, len(timestamps), per_batch):
        chunk = timestamps[first:first + per_batch]
        buffer = bytearray(build_batch([Record(i, stamp, None, b"v") for i, stamp in enumerate(chunk)]))
        builder.append(buffer, restamp(buffer, split_batches(buffer), builder.next_offset))
    data = bytes(builder.seal(1))
    return data, build_index(builder.batches, interval, len(data))


def _scan(data, timestamp, low, high):
    from kafscale.protocol.log_view import first_record_at
    from kafscale.protocol.segment import read_segment

    segment = read_segment(data)
    return first_record_at(segment.data, segment.batches, timestamp, low, high)


@settings(max_examples=60, deadline=None)
@given(timestamps=st.lists(st.integers(0, 1000), min_size=1, max_size=60), per_batch=st.integers(1, 5),
       interval=st.integers(1, 12), target=st.integers(-5, 1005), low=st.integers(0, 30))
def test_the_sparse_index_finds_what_a_whole_scan_finds_reading_only_spans(timestamps, per_batch, interval,
                                                                            target, low):
    from kafscale.protocol.layout import index_key_of_segment
    from kafscale.protocol.log_view import SEGMENT, Piece

    data, index = _timed_segment(timestamps, per_batch, interval)
    key = segment_key("ns", "t", 0, 0)
    objects = {key: data, index_key_of_segment(key): index.encode()}
    piece = Piece(SEGMENT, key, 0, len(timestamps) - 1, len(data))
    high = len(timestamps)
    drive = Drive(objects)
    assert drive.run(reads.first_at_timestamp(piece, target, low, high)) == _scan(data, target, low, high)
    spans = [read for step in drive.steps for read in step if isinstance(read, reads.ReadRange)]
    assert all(read.end - read.start < len(data) for read in spans)  # never the whole segment


def test_a_segment_without_a_usable_index_is_read_whole_by_the_caller():
    from kafscale.protocol.layout import index_key_of_segment
    from kafscale.protocol.log_view import SEGMENT, Piece

    data, index = _timed_segment([5, 6, 7], 1, 1)
    key = segment_key("ns", "t", 0, 0)
    piece = Piece(SEGMENT, key, 0, 2, len(data))
    assert Drive({key: data}).run(reads.first_at_timestamp(piece, 6, 0, 3)) is reads.LOAD_WHOLE
    stale = _timed_segment([5, 6], 1, 1)[1]  # the index of the segment before a merge grew it
    objects = {key: data, index_key_of_segment(key): stale.encode()}
    assert Drive(objects).run(reads.first_at_timestamp(piece, 6, 0, 3)) is reads.LOAD_WHOLE
    from kafscale.protocol.index import SegmentIndex

    without_timestamps = SegmentIndex(index.entries, index.interval, version=1)  # an early format's
    objects[index_key_of_segment(key)] = without_timestamps.encode()
    assert Drive(objects).run(reads.segment_index(piece)) is None
    assert Drive(objects).run(reads.first_at_timestamp(piece, 6, 0, 3)) is reads.LOAD_WHOLE
    objects[index_key_of_segment(key)] = index.encode()
    assert Drive(objects).run(reads.first_at_timestamp(piece, 6, 0, 3)) == (1, 6)
