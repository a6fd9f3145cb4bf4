"""The C record decoder (protocol/_record_columns.c) against the Python reference
(records.decode_columns): for any records, codecs, ranges and corruptions, the same Arrow
columns or the same refusal."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale.protocol import column_buffers
from kafscale.protocol.compression import Compression
from kafscale.protocol.errors import CorruptBatch
from kafscale.protocol.layout import segment_key
from kafscale.protocol.log_view import SEGMENT, Piece
from kafscale.protocol.records import Record, RecordHeader, build_batch, decode_columns, split_batches
from kafscale.protocol.segment import SegmentBuilder
from kafscale.storage_backends import MemoryBackend

pytest.importorskip("pyarrow", reason="pyarrow is a test dependency (kafscale[spark])")
pytestmark = pytest.mark.skipif(not column_buffers.NATIVE, reason="the C extension was not built")

from kafscale.spark_connector.planning import PartitionRange  # noqa: E402
from kafscale.spark_connector.rows import read_range  # noqa: E402

_bytes = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3)
_records = st.lists(st.tuples(_bytes, _bytes, _headers, st.integers(-5000, 5000)), min_size=1, max_size=30)
_codecs = st.sampled_from(list(Compression))


def _batch(records, base_offset, codec, log_append=False):
    built = [Record(i, 1_700_000_000_000 + delta, key, value, tuple(RecordHeader(k, v) for k, v in headers))
             for i, (key, value, headers, delta) in enumerate(records)]
    return build_batch(built, base_offset=base_offset, compression=codec, log_append_time=log_append)


def _segment_store(batches):
    store = MemoryBackend()
    builder = SegmentBuilder(0)
    for data in batches:
        builder.append(data, split_batches(data))
    key = segment_key("kafscale", "t", 0, 0)
    store.put(key, bytes(builder.seal(0)))
    return store, Piece(SEGMENT, key, 0, builder.next_offset - 1, store.head(key).size), builder.next_offset


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_records, _codecs, st.booleans()), min_size=1, max_size=4), st.booleans(), st.data())
def test_native_and_reference_decoders_give_the_same_columns(batches, include_headers, data):
    built, offset = [], 0
    for records, codec, log_append in batches:
        built.append(_batch(records, offset, codec, log_append))
        offset += len(records)
    store, piece, end = _segment_store(built)
    start = data.draw(st.integers(0, end - 1))
    stop = data.draw(st.integers(start + 1, end))
    part = PartitionRange("t", 0, start, stop, (piece,))
    native = [b.to_pylist() for b in read_range(store, part, include_headers, native=True)]
    reference = [b.to_pylist() for b in read_range(store, part, include_headers, native=False)]
    assert native == reference
    assert sum(len(b) for b in native) == stop - start


def test_malformed_header_keys_become_replacement_characters_as_in_the_reference():
    data = bytearray(_batch([(b"k", b"v", [("\x00ab", b"x")], 0)], 0, Compression.NONE))
    at = data.index(b"\x00ab")
    data[at] = 0xFF  # not UTF-8 (the CRC is not checked by the decoder: the segment read does)
    header = split_batches(bytes(data), check_crc=False)[0]
    lists = ([], [], [], [], [])
    decode_columns(bytes(data), header, 0, 1, lists)
    buffers = column_buffers.new_buffers(True)
    assert column_buffers.decode_into_buffers(bytes(data), header, 0, 1, buffers) == 1
    assert bytes(buffers[10]).decode() == lists[4][0][0].key == "\ufffdab"


@settings(max_examples=300, deadline=None)
@given(_records, st.data())
def test_corrupted_records_are_refused_by_both_or_read_alike(records, data):
    """Flip or cut bytes of the record section: the decoders agree (the batch CRC would catch
    it in a segment; this is the decoder's own defence)."""
    raw = bytearray(_batch(records, 0, Compression.NONE))
    position = data.draw(st.integers(61, len(raw) - 1))
    if data.draw(st.booleans()):
        raw[position] = data.draw(st.integers(0, 255))
    else:
        del raw[position:]
        raw[8:12] = (len(raw) - 12).to_bytes(4, "big")  # the batch length follows the cut
    header = split_batches(bytes(raw), check_crc=False)[0]
    lists = ([], [], [], [], [])
    buffers = column_buffers.new_buffers(True)
    try:
        decode_columns(bytes(raw), header, 0, 1 << 40, lists)
    except CorruptBatch:
        with pytest.raises(CorruptBatch):
            column_buffers.decode_into_buffers(bytes(raw), header, 0, 1 << 40, buffers)
        assert [len(b) for b in buffers] == [len(b) for b in column_buffers.new_buffers(True)]  # nothing left
        return
    assert column_buffers.decode_into_buffers(bytes(raw), header, 0, 1 << 40, buffers) == len(lists[0])
