"""The cleaner's record logic against a model of Kafka's cleaner semantics."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol.cleaning import KeyMap, clean_batch, delete_horizon
from kafscale.protocol.compression import Compression
from kafscale.protocol.records import DELETE_HORIZON_BIT, Record, RecordHeader, build_batch, iter_records, split_batches

from .strategies import codecs

NOW = 1_700_000_000_000
RETENTION = 60_000


@st.composite
def logs(draw):
    """A partition's batches: records over a few keys, some keyless, some tombstones."""
    batches, offset = [], 0
    for _ in range(draw(st.integers(1, 6))):
        count = draw(st.integers(1, 8))
        base_timestamp = draw(st.integers(NOW - 10**9, NOW))
        records = [Record(offset + i, base_timestamp + draw(st.integers(0, 5000)),
                          draw(st.none() | st.sampled_from([b"a", b"b", b"c", b"d"])),
                          draw(st.none() | st.binary(max_size=20)),
                          tuple(RecordHeader("h", draw(st.none() | st.binary(max_size=4)))
                                for _ in range(draw(st.integers(0, 2)))))
                   for i in range(count)]
        producer = draw(st.sampled_from([-1, 7]))
        codec = draw(codecs)
        batches.append(build_batch(records, base_offset=offset, base_timestamp=base_timestamp, compression=codec,
                                   xerial=codec == Compression.SNAPPY, producer_id=producer,
                                   producer_epoch=0 if producer >= 0 else -1, base_sequence=offset if producer >= 0 else -1))
        offset += count
    return b"".join(batches)


def _records(data):
    return [r for h in split_batches(data) for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))]


def _clean(data, now):
    headers = split_batches(data)
    keys = KeyMap(1 << 20)
    for header in headers:
        assert keys.add_batch(data, header) is None
    out = b""
    for header in headers:
        result = clean_batch(data, header, keys, now, RETENTION, keep_header=header is headers[-1] and header.producer_id >= 0)
        if result.data is not None:
            out += bytes(result.data)
    return out


@settings(max_examples=150, deadline=None)
@given(logs())
def test_cleaning_keeps_each_keys_newest_record_unchanged_at_its_offset(data):
    original = _records(data)
    newest = {r.key: r.offset for r in original if r.key is not None}
    cleaned = _clean(data, NOW)
    expected = [r for r in original if r.key is not None and newest[r.key] == r.offset]
    assert _records(cleaned) == expected  # offsets, timestamps, keys, values and headers unchanged
    for header in split_batches(cleaned):  # batches keep their offsets and producer fields
        before = next(h for h in split_batches(data) if h.base_offset == header.base_offset)
        assert (header.last_offset, header.producer_id, header.base_sequence) == \
               (before.last_offset, before.producer_id, before.base_sequence)
        tombstones = any(r.value is None for r in iter_records(cleaned[header.position:header.position + header.size],
                                                              header.at(position=0)))
        assert (delete_horizon(header) == NOW + RETENTION) == tombstones
    # The second pass, past the horizon, removes the tombstones and nothing else.
    again = _clean(cleaned, NOW + RETENTION)
    assert _records(again) == [r for r in expected if r.value is not None]


@settings(max_examples=60, deadline=None)
@given(logs())
def test_a_pass_that_removes_nothing_changes_no_byte(data):
    cleaned = _clean(data, NOW)
    assert _clean(cleaned, NOW) == cleaned


def test_an_emptied_batch_stays_as_its_header_only_when_asked():
    first = build_batch([(b"a", b"1")], producer_id=3, producer_epoch=1, base_sequence=0)
    second = build_batch([(b"a", b"2")], base_offset=1)
    data = first + second
    headers = split_batches(data)
    keys = KeyMap(1 << 20)
    for header in headers:
        keys.add_batch(data, header)
    kept = clean_batch(data, headers[0], keys, NOW, RETENTION, keep_header=True)
    [empty] = split_batches(kept.data)
    assert (empty.records_count, empty.producer_id, empty.producer_epoch, empty.last_offset) == (0, 3, 1, 0)
    assert not empty.attributes & DELETE_HORIZON_BIT and empty.compression == 0
    assert clean_batch(data, headers[0], keys, NOW, RETENTION, keep_header=False).data is None


@pytest.mark.parametrize("native, capacity", [(False, 10), (True, 24)])
def test_the_key_map_stops_at_its_budget(native, capacity):
    """1,360 bytes: ten keys of the dict's 136; the C table's largest power of two of 24-byte
    slots within it (32), three quarters full."""
    data = build_batch([(b"k%d" % i, b"v") for i in range(100)])
    [header] = split_batches(data)
    keys = KeyMap(10 * 136, native=native)
    assert keys.add_batch(data, header) == capacity and len(keys) == keys.capacity == capacity
    # Mapping goes on from a given offset: a pass that stopped mid-batch resumes there.
    more = KeyMap(10 * 136, native=native)
    assert more.add_batch(data, header, start=capacity) == 2 * capacity and not more.superseded(b"k0", -1)


def test_the_c_key_table_is_built():
    from kafscale.protocol import cleaning

    assert cleaning._NativeTable is not None, "protocol/_key_map.c was not compiled (pip install -e . needs gcc)"


@given(st.integers(200, 5_000), st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2**62)), max_size=400))
def test_the_c_key_table_agrees_with_the_dict(budget, operations):
    """Same answers to every put and get, through growth and up to the capacity."""
    from kafscale.protocol.cleaning import DictTable, _NativeTable, key_digest

    native = _NativeTable(budget)
    reference = DictTable(native.capacity() * DictTable.BYTES_PER_KEY)
    assert reference.capacity() == native.capacity()
    for key, offset in operations:
        digest = key_digest(b"%d" % key)
        assert native.put(digest, offset) == reference.put(digest, offset)
        assert native.get(digest) == reference.get(digest) and len(native) == len(reference)
    for key in range(301):
        digest = key_digest(b"%d" % key)
        assert native.get(digest) == reference.get(digest)


def test_the_c_key_table_refuses_what_is_not_a_digest():
    from kafscale.protocol.cleaning import _NativeTable

    table = _NativeTable(4096)
    with pytest.raises(ValueError):
        table.put(b"short", 1)
    with pytest.raises(ValueError):
        table.put(bytes(16), -1)
    with pytest.raises(TypeError):
        table.get("not bytes")
