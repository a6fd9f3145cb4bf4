"""Produce validation walks the records: a batch whose records contradict its header
(count, offset deltas, field lengths, compression) is refused before it takes offsets."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import example, given
from hypothesis import strategies as st

from kafscale.protocol.compression import Compression, compress
from kafscale.protocol.errors import CompressionError, CorruptBatch, ErrorCode, InvalidRecord
from kafscale.protocol.records import BATCH_HEADER_SIZE, Record, build_batch, validate_record_set

from .strategies import codecs, record_lists


def _relabel(batch: bytes, records_count: int, last_offset_delta: int | None = None,
             codec: int | None = None) -> bytes:
    """The same records under a header that says something else (CRC recomputed, as a
    hostile client would)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 57, records_count)
    struct.pack_into(">i", out, 23, records_count - 1 if last_offset_delta is None else last_offset_delta)
    if codec is not None:
        struct.pack_into(">h", out, 21, codec)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _dense(records: list[Record]) -> list[Record]:
    """As a producer sends them: offsets 0..n-1 (the strategy also makes compacted gaps)."""
    return [record._replace(offset=index) for index, record in enumerate(records)]


@given(records=record_lists(), codec=codecs)
def test_every_well_formed_batch_passes(records, codec):
    records = _dense(records)
    batch = build_batch(records, compression=codec)
    assert [h.records_count for h in validate_record_set(batch)] == [len(records)]


@given(records=record_lists(), codec=codecs, claimed=st.integers(1, 40))
def test_a_header_that_miscounts_its_records_is_invalid_record(records, codec, claimed):
    records = _dense(records)
    batch = build_batch(records, compression=codec)
    if claimed == len(records):
        return
    with pytest.raises(InvalidRecord) as caught:
        validate_record_set(_relabel(batch, claimed))
    assert caught.value.code == ErrorCode.invalid_record


def test_one_in_the_header_three_inside():
    # The reported defect: stored at offset 0, the next batch got offset 1, consumers read 0, 1, 2, 1.
    batch = _relabel(build_batch([(b"k", b"a"), (b"k", b"b"), (b"k", b"c")]), 1)
    with pytest.raises(InvalidRecord, match="more records than its count 1"):
        validate_record_set(batch)


def test_five_in_the_header_one_inside():
    batch = _relabel(build_batch([(b"k", b"a")]), 5)
    with pytest.raises(InvalidRecord, match="holds 1 records, its header says 5"):
        validate_record_set(batch)


def test_offset_deltas_must_run_from_zero():
    records = [Record(10, 0, b"k", b"a"), Record(12, 0, b"k", b"b")]  # deltas 0, 2
    batch = _relabel(build_batch(records, base_offset=10), 2, last_offset_delta=1)
    with pytest.raises(InvalidRecord, match="offset delta 2"):
        validate_record_set(batch)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_payload_that_is_not_its_codec_is_corrupt_message(codec):
    plain = build_batch([(b"k", b"v" * 50)])
    batch = _relabel(plain, 1, codec=int(codec))  # flagged compressed, stored plain
    with pytest.raises(CorruptBatch) as caught:
        validate_record_set(batch)
    assert caught.value.code == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_decompression_bomb_stops_at_the_bound(codec):
    records = build_batch([(None, b"\x00" * 4_000_000)])[BATCH_HEADER_SIZE:]
    payload = compress(codec, records)
    assert len(payload) < 400_000
    header = struct.pack(">hiqqqhii", int(codec), 0, 0, 0, -1, -1, -1, 1)
    after_crc = header + payload
    batch = struct.pack(">qiibI", 0, 9 + len(after_crc), -1, 2, crc32c(after_crc)) + after_crc
    with pytest.raises(CompressionError, match="beyond"):
        validate_record_set(batch, max_uncompressed=1_000_000)
    assert validate_record_set(batch, max_uncompressed=8_000_000)


@given(records=record_lists(), data=st.data())
def test_any_corruption_of_the_records_is_refused_or_harmless(records, data):
    """Flip bytes in the record section of an uncompressed batch (CRC fixed up): either
    validation refuses it, or what is stored still decodes to the header's count."""
    from kafscale.protocol.records import iter_records

    batch = bytearray(build_batch(_dense(records)))
    position = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))
    batch[position] ^= data.draw(st.integers(1, 255))
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    try:
        (header,) = validate_record_set(bytes(batch))
    except CorruptBatch:
        return
    assert len(list(iter_records(bytes(batch), header))) == header.records_count


def test_the_c_record_walk_is_built():
    from kafscale.protocol import records

    assert records._native_walk is not None, "protocol/_record_walk.c was not compiled (pip install -e . needs gcc)"


def _outcome(payload: bytes, pos: int, end: int, count: int, native: bool):
    """(end position or the kind of refusal, the records found without a key)."""
    from kafscale.protocol.records import walk_records

    keyless: list[int] = []
    try:
        return walk_records(payload, pos, end, count, native=native, keyless=keyless), keyless
    except InvalidRecord:
        return "invalid", None
    except CorruptBatch:
        return "corrupt", None


@given(records=record_lists(), data=st.data())
def test_the_c_walk_agrees_with_the_python_walk(records, data):
    """Same end position or same kind of refusal, on good records and on corrupted ones
    (bytes flipped, the section cut short, counts that lie)."""
    batch = bytearray(build_batch(_dense(records)))
    if data.draw(st.booleans()):
        position = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))
        batch[position] ^= data.draw(st.integers(1, 255))
    end = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch)))
    count = data.draw(st.integers(0, len(records) + 2))
    payload = bytes(batch)
    assert _outcome(payload, BATCH_HEADER_SIZE, end, count, True) == \
        _outcome(payload, BATCH_HEADER_SIZE, end, count, False)


@given(payload=st.binary(max_size=200), count=st.integers(0, 5))
@example(payload=b"\x0c\x00\x00\x80\x80\x80\x80\x01", count=1)  # an offset delta running past its record
def test_the_c_walk_agrees_on_garbage(payload, count):
    assert _outcome(payload, 0, len(payload), count, True) == _outcome(payload, 0, len(payload), count, False)


@given(records=record_lists())
def test_the_walk_names_the_records_without_a_key(records):
    from kafscale.protocol.errors import RecordsWithoutKey

    dense = _dense(records)
    batch = build_batch(dense)
    expected = [i for i, record in enumerate(dense) if record.key is None]
    for native in (True, False):
        assert _outcome(batch, BATCH_HEADER_SIZE, len(batch), len(dense), native)[1] == expected
    if expected:
        with pytest.raises(RecordsWithoutKey) as refused:
            validate_record_set(batch, require_keys=True)
        assert refused.value.indexes == expected and refused.value.code == ErrorCode.invalid_record
    else:
        validate_record_set(batch, require_keys=True)
