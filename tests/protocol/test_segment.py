import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol.errors import SegmentFormatError
from kafscale.protocol.index import INDEX_HEADER_SIZE, SegmentIndex, build_index
from kafscale.protocol.records import build_batch, iter_records, restamp, split_batches
from kafscale.protocol.segment import (
    SEGMENT_FOOTER_SIZE,
    SEGMENT_HEADER_SIZE,
    SegmentBuilder,
    parse_segment_footer,
    parse_segment_header,
    read_segment,
)

from .strategies import codecs, record_lists


def _segment(record_sets, base_offset, created_ms=1_700_000_000_000):
    builder = SegmentBuilder(base_offset)
    for record_set in record_sets:
        buffer = bytearray(record_set)
        builder.append(buffer, restamp(buffer, split_batches(buffer), builder.next_offset))
    return builder, builder.seal(created_ms)


@st.composite
def record_sets(draw):
    sets = []
    for _ in range(draw(st.integers(1, 4))):
        batches = [
            build_batch(records, base_offset=records[0].offset, compression=draw(codecs))
            for records in draw(st.lists(record_lists(max_size=6), min_size=1, max_size=3))
        ]
        sets.append(b"".join(batches))
    return sets


@given(sets=record_sets(), base_offset=st.integers(0, 2**50), interval=st.integers(1, 20))
def test_segment_and_index_round_trip(sets, base_offset, interval):
    builder, data = _segment(sets, base_offset)
    segment = read_segment(data)
    assert segment.base_offset == base_offset
    assert segment.last_offset == builder.next_offset - 1
    assert segment.header.batch_count == len(segment.batches)
    assert b"".join(bytes(segment.batch_bytes(b)) for b in segment.batches) == data[
        SEGMENT_HEADER_SIZE:-SEGMENT_FOOTER_SIZE
    ]
    assert segment.batches == builder.batches
    offsets = [r.offset for b in segment.batches for r in iter_records(data, b)]
    assert offsets == sorted(offsets) and offsets[0] >= base_offset

    index = build_index(segment.batches, interval)
    assert SegmentIndex.decode(index.encode()) == index
    sized = build_index(segment.batches, interval, len(data))  # version 3 names its segment
    assert SegmentIndex.decode(sized.encode()) == sized and sized.entries == index.entries
    assert sized.describes(len(data)) and not sized.describes(len(data) + 1) and index.describes(1)
    for batch in segment.batches:  # every batch is reachable from the index
        position = index.position_for_offset(batch.base_offset)
        assert position is not None and position <= batch.position
    assert index.max_timestamp == max(b.max_timestamp for b in segment.batches)


@given(sets=record_sets(), data=st.data())
def test_any_flipped_bit_is_detected(sets, data):
    _, segment = _segment(sets, 10)
    corrupt = bytearray(segment)
    position = data.draw(st.integers(0, len(corrupt) - 1))
    corrupt[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(SegmentFormatError):
        read_segment(bytes(corrupt))


@given(sets=record_sets(), data=st.data())
def test_truncation_is_detected(sets, data):
    _, segment = _segment(sets, 0)
    cut = data.draw(st.integers(0, len(segment) - 1))
    with pytest.raises(SegmentFormatError):
        read_segment(segment[:cut])


def test_header_and_footer_parsers_name_the_problem():
    _, segment = _segment([build_batch([(b"k", b"v")])], 0)
    with pytest.raises(SegmentFormatError, match="magic"):
        parse_segment_header(b"KAFZ" + segment[4:32])
    with pytest.raises(SegmentFormatError, match="torn or partial"):
        parse_segment_footer(segment[:-1])
    with pytest.raises(SegmentFormatError, match="truncated"):
        parse_segment_header(segment[:31])


def test_builder_refuses_gaps_and_empty_segments():
    builder = SegmentBuilder(5)
    with pytest.raises(ValueError):
        builder.seal(0)
    batch = bytearray(build_batch([(b"k", b"v")]))
    with pytest.raises(ValueError):
        builder.append(batch, split_batches(batch))  # base offset 0, segment expects 5


@given(sets=record_sets(), data=st.data())
def test_index_corruption_is_detected(sets, data):
    _, segment = _segment(sets, 0)
    index = build_index(read_segment(segment).batches, 1, len(segment)).encode()
    cut = data.draw(st.integers(0, len(index) - 1))
    with pytest.raises(SegmentFormatError):
        SegmentIndex.decode(index[:cut])
    corrupt = bytearray(index)
    corrupt[data.draw(st.integers(0, 5))] ^= 0xFF  # magic or version
    with pytest.raises(SegmentFormatError):
        SegmentIndex.decode(bytes(corrupt))


def test_index_v1_without_timestamps_still_reads():
    from kafscale.protocol.index import IndexEntry

    v1 = SegmentIndex((IndexEntry(0, 32), IndexEntry(100, 4000)), 100, version=1)
    decoded = SegmentIndex.decode(v1.encode())
    assert decoded.entries == v1.entries
    assert len(v1.encode()) == INDEX_HEADER_SIZE + 2 * 12


def test_timestamp_lookup_finds_first_span_reaching_the_target():
    from kafscale.protocol.index import IndexEntry

    index = SegmentIndex((IndexEntry(0, 32, 100), IndexEntry(10, 500, 250), IndexEntry(20, 900, 300)), 10)
    assert index.entry_for_timestamp(50).offset == 0
    assert index.entry_for_timestamp(101).offset == 10
    assert index.entry_for_timestamp(300).offset == 20
    assert index.entry_for_timestamp(301) is None
    assert index.position_for_offset(15) == 500
    assert index.position_for_offset(-1) is None
