"""The C batch checks (protocol/_record_walk.c) against the Python reference in records.py:
on any bytes, including hostile headers whose CRC is recomputed so the checks behind it are
reached, both return the same headers or raise the same error with the same message."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol import records
from kafscale.protocol.compression import Compression
from kafscale.protocol.errors import CorruptBatch, InvalidRecord
from kafscale.protocol.records import BatchHeader, build_batch, split_batches, validate_record_set

from .strategies import codecs, record_lists

pytestmark = pytest.mark.skipif(records._native_validate is None,
                                reason="the C extension is not built (no compiler): only the reference runs")

# Header fields a hostile client may set to anything: (offset, struct format).
_FIELDS = [(8, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (57, ">i")]


def _outcome(check, data: bytes, **kwargs):
    try:
        return check(data, **kwargs)
    except (CorruptBatch, InvalidRecord) as exc:
        return type(exc), str(exc)


def _same(check, data: bytes, **kwargs) -> None:
    native = _outcome(check, data, **kwargs)
    reference = _outcome(check, data, native=False, **kwargs)
    assert native == reference
    if isinstance(native, list):
        assert all(type(header) is BatchHeader for header in native)


@st.composite
def record_sets(draw) -> bytes:
    """One to three batches (any codec), then a header field set to anything, its CRC
    recomputed or not, and the set cut short or not."""
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        entries = [record._replace(offset=index) for index, record in enumerate(draw(record_lists(max_size=4)))]
        control = draw(st.booleans()) and draw(st.booleans())
        batches.append(build_batch(entries, compression=draw(codecs), control=control))
    data = bytearray(b"".join(batches))
    if draw(st.booleans()):
        start = sum(len(b) for b in batches[:draw(st.integers(0, len(batches) - 1))])
        offset, fmt = draw(st.sampled_from(_FIELDS))
        bits = struct.calcsize(fmt) * 8
        struct.pack_into(fmt, data, start + offset, draw(st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)))
        if draw(st.booleans()):
            length = struct.unpack_from(">i", data, start + 8)[0]
            end = min(len(data), start + 12 + max(length, 9))
            struct.pack_into(">I", data, start + 17, crc32c(bytes(data[start + 21:end])))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(max_examples=400)
@given(data=record_sets())
def test_split_agrees_with_the_reference(data):
    _same(split_batches, data)
    _same(split_batches, data, check_crc=False)


@settings(max_examples=400)
@given(data=record_sets())
def test_produce_validation_agrees_with_the_reference(data):
    _same(validate_record_set, data)


@given(garbage=st.binary(max_size=200))
def test_garbage_agrees_with_the_reference(garbage):
    _same(split_batches, garbage)
    _same(validate_record_set, garbage)


def test_a_compressed_batch_between_plain_ones_is_still_walked():
    plain = build_batch([(b"k", b"v")])
    lying = bytearray(build_batch([(b"k", b"a"), (b"k", b"b")], compression=Compression.GZIP))
    struct.pack_into(">i", lying, 57, 1)  # one record, says the header; two inside
    struct.pack_into(">i", lying, 23, 0)
    struct.pack_into(">I", lying, 17, crc32c(bytes(lying[21:])))
    with pytest.raises(InvalidRecord, match="more records than its count 1"):
        validate_record_set(plain + bytes(lying) + plain)


def test_headers_are_read_as_the_reference_reads_them():
    batch = build_batch([(b"k", b"v")] * 3, base_offset=2**40, producer_id=2**50, producer_epoch=7,
                        base_sequence=2**31 - 1, partition_leader_epoch=-1, base_timestamp=-5)
    native, reference = split_batches(batch + batch), split_batches(batch + batch, native=False)
    assert native == reference and native[1].position == len(batch)
    assert native[0].crc == struct.unpack_from(">I", batch, 17)[0]  # unsigned, as the reference reads it
    assert (native[0].base_offset, native[0].producer_id, native[0].base_timestamp) == (2**40, 2**50, -5)


@st.composite
def checked_record_sets(draw) -> bytearray:
    """Zero to four valid batches (any codec), stamped at some offset, the one writable buffer
    a Produce request's record set is."""
    batches = [build_batch([record._replace(offset=index) for index, record in enumerate(draw(record_lists(max_size=6)))],
                           compression=draw(codecs)) for _ in range(draw(st.integers(0, 4)))]
    data = bytearray(b"".join(batches))
    if batches:
        records.restamp(data, split_batches(data), draw(st.integers(0, 2**50)))
    return data


@settings(max_examples=300)
@given(data=checked_record_sets(), initial=st.integers(0, 2**32 - 1))
def test_a_record_set_crc_from_its_batches_crcs_is_the_crc_of_its_bytes(data, initial):
    assert records.record_set_crc(data, split_batches(data), initial) == crc32c(bytes(data), initial)


def test_a_record_set_crc_trusts_its_checked_batch_crcs_and_reads_only_what_they_leave_out():
    data = bytearray(build_batch([(None, b"value %d" % i) for i in range(5)]))
    headers = split_batches(data)
    data[-1] ^= 0xFF  # a record byte the batch's own (already checked) CRC stands for
    assert records.record_set_crc(data, headers) == crc32c(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))
    assert records.record_set_crc(data, headers) != crc32c(bytes(data))


def test_headers_that_do_not_cover_the_record_set_are_refused():
    one = build_batch([(None, b"a")])
    headers = split_batches(one)
    with pytest.raises(ValueError, match="cover"):
        records.record_set_crc(one + one, headers)  # the second batch has no header
    with pytest.raises(ValueError, match="does not continue"):
        records.record_set_crc(one, [headers[0].at(position=1)])
    with pytest.raises(ValueError, match="does not continue"):
        records.record_set_crc(one[:-1], headers)  # a batch past the end
