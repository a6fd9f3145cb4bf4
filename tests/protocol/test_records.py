import struct

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kafscale.protocol.compression import Compression
from kafscale.protocol.errors import CorruptBatch
from kafscale.protocol.records import (
    BATCH_HEADER_SIZE,
    build_batch,
    iter_records,
    parse_batch_header,
    restamp,
    split_batches,
    validate_record_set,
)

from .strategies import codecs, record_lists


@given(records=record_lists(), codec=codecs, xerial=st.booleans())
def test_build_then_iterate_round_trips(records, codec, xerial):
    batch = build_batch(records, base_offset=records[0].offset, compression=codec, xerial=xerial)
    (header,) = split_batches(batch)
    assert header.records_count == len(records)
    assert header.compression == codec
    assert header.last_offset == records[-1].offset
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert list(iter_records(batch)) == records


@given(records=record_lists(), codec=codecs, new_base=st.integers(0, 2**50))
def test_restamp_changes_only_the_base_offset(records, codec, new_base):
    batch = build_batch(records, base_offset=records[0].offset, compression=codec)
    two = bytearray(batch + batch)
    stamped = restamp(two, split_batches(two), new_base)
    assert [h.base_offset for h in stamped] == [new_base, stamped[0].last_offset + 1]
    assert two[8:len(batch)] == batch[8:]  # everything after the base offset is untouched
    reread = split_batches(bytes(two))  # CRCs still verify
    assert [h.base_offset for h in reread] == [h.base_offset for h in stamped]
    decoded = list(iter_records(bytes(two), reread[1]))
    delta = stamped[1].base_offset - records[0].offset
    assert [r.offset for r in decoded] == [r.offset + delta for r in records]


@given(records=record_lists(max_size=5), codec=codecs, data=st.data())
def test_any_flipped_byte_under_the_crc_is_detected(records, codec, data):
    batch = bytearray(build_batch(records, base_offset=records[0].offset, compression=codec))
    position = data.draw(st.integers(min_value=17, max_value=len(batch) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=7))
    batch[position] ^= 1 << bit
    with pytest.raises(CorruptBatch):
        split_batches(bytes(batch))


@given(records=record_lists(max_size=5), data=st.data())
def test_truncation_is_detected(records, data):
    batch = build_batch(records, base_offset=records[0].offset)
    cut = data.draw(st.integers(min_value=1, max_value=len(batch) - 1))
    with pytest.raises(CorruptBatch):
        split_batches(batch[:cut])


def _forge(attributes_and_records: bytes, records_count: int, last_offset_delta: int) -> bytes:
    """A batch whose CRC is right but whose record section is whatever we say."""
    from crc32c import crc32c

    after_crc = struct.pack(">hiqqqhii", 0, last_offset_delta, 0, 0, -1, -1, -1, records_count)
    after_crc += attributes_and_records
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


@given(garbage=st.binary(max_size=80), count=st.integers(0, 5))
def test_garbage_records_raise_corrupt_batch_only(garbage, count):
    batch = _forge(garbage, count, max(count - 1, 0))
    try:
        list(iter_records(batch))
    except CorruptBatch:
        pass


def test_bad_varint_is_rejected():
    batch = _forge(b"\xff" * 12, 1, 0)
    with pytest.raises(CorruptBatch, match="varint"):
        list(iter_records(batch))


def test_record_length_past_the_batch_is_rejected():
    batch = _forge(b"\x7e\x00\x00\x00\x01\x01\x00", 1, 0)  # length 63, 6 bytes follow
    with pytest.raises(CorruptBatch, match="runs past"):
        list(iter_records(batch))


def test_trailing_bytes_after_records_are_rejected():
    good = build_batch([(b"k", b"v")])
    records_section = good[BATCH_HEADER_SIZE:] + b"\x00"
    with pytest.raises(CorruptBatch, match="after the last record"):
        list(iter_records(_forge(records_section, 1, 0)))


def test_wrong_magic_is_rejected():
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[16] = 1
    with pytest.raises(CorruptBatch, match="magic"):
        parse_batch_header(bytes(batch))


def test_bad_lengths_are_rejected():
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", batch, 8, 10)
    with pytest.raises(CorruptBatch, match="shorter than its header"):
        parse_batch_header(bytes(batch))
    struct.pack_into(">i", batch, 8, 10_000)
    with pytest.raises(CorruptBatch, match="claims"):
        parse_batch_header(bytes(batch))


def test_produce_validation_requires_consistent_counts():
    with pytest.raises(CorruptBatch, match="empty"):
        validate_record_set(b"")
    with pytest.raises(CorruptBatch, match="last offset delta"):
        validate_record_set(_forge(b"", 3, 0))


def test_control_and_transactional_flags():
    batch = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], control=True,
                        transactional=True, producer_id=7, producer_epoch=1)
    header = parse_batch_header(batch)
    assert header.is_control and header.is_transactional
    assert header.producer_id == 7


def test_log_append_time_uses_max_timestamp():
    from kafscale.protocol.records import Record

    batch = build_batch([Record(0, 5, None, b"a"), Record(1, 9, None, b"b")], log_append_time=True)
    assert [r.timestamp for r in iter_records(batch)] == [9, 9]


def test_unknown_codec_in_attributes_is_rejected():
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[22] |= 0x07
    with pytest.raises(CorruptBatch, match="compression"):
        parse_batch_header(bytes(batch))


@given(codec=st.sampled_from([c for c in Compression if c != Compression.NONE]))
def test_corrupt_compressed_payload_raises_corrupt_batch(codec):
    records = [(b"k%d" % i, b"v" * 50) for i in range(20)]
    from kafscale.protocol.compression import compress

    payload = compress(codec, b"not the records" * 10)
    assume(payload)
    with pytest.raises(CorruptBatch):
        list(iter_records(_forge_compressed(payload, codec, len(records))))


def _forge_compressed(payload: bytes, codec: int, count: int) -> bytes:
    from crc32c import crc32c

    after_crc = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + payload
    return struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc


@given(records=record_lists(), codec=codecs, data=st.data())
def test_column_decoding_equals_record_iteration(records, codec, data):
    from kafscale.protocol.records import decode_columns

    batch = build_batch(records, base_offset=records[0].offset, compression=codec)
    (header,) = split_batches(batch)
    start = data.draw(st.integers(records[0].offset - 1, records[-1].offset + 1))
    end = data.draw(st.integers(start, records[-1].offset + 2))
    columns = ([], [], [], [], [])
    decode_columns(batch, header, start, end, columns)
    expected = [r for r in iter_records(batch) if start <= r.offset < end]
    assert columns == (
        [r.offset for r in expected], [r.timestamp for r in expected], [r.key for r in expected],
        [r.value for r in expected], [r.headers for r in expected],
    )
