"""The C record encoder and key partitioner (protocol/_record_encode.c) against the Python
reference (records.build_batch, kafka_client.partitioner): the same batch bytes and the
same partitions for any keys and values, sliced Arrow arrays included."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.kafka_client.partitioner import partition_for_key
from kafscale.protocol import column_encoding
from kafscale.protocol.records import Record, batch_of, build_batch, iter_records

pa = pytest.importorskip("pyarrow", reason="pyarrow is a test dependency (kafscale[spark])")
pytestmark = pytest.mark.skipif(not column_encoding.NATIVE, reason="the C extension was not built")

_cells = st.lists(st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300)),
                  min_size=1, max_size=60)


def _buffers(column):
    validity, offsets, data = column.buffers()
    return validity, offsets, data if data is not None else b"", column.offset


@settings(max_examples=300, deadline=None)
@given(_cells, st.data())
def test_native_encoding_equals_the_reference_batch(rows, data):
    lead = data.draw(st.integers(0, 5))  # rows before the slice: the arrays' offsets are honoured
    keys = pa.array([b"k"] * lead + [k for k, _ in rows], pa.binary()).slice(lead)
    values = pa.array([None] * lead + [v for _, v in rows], pa.binary()).slice(lead)
    start = data.draw(st.integers(0, len(rows) - 1))
    stop = data.draw(st.integers(start + 1, len(rows)))
    stamp = 1_700_000_000_123
    section = column_encoding.encode_rows(_buffers(keys), _buffers(values), start, stop)
    native = batch_of(section, stop - start, stop - start - 1, stamp, stamp, producer_id=7, producer_epoch=1,
                      base_sequence=3)
    reference = build_batch([Record(i, stamp, k, v) for i, (k, v) in enumerate(rows[start:stop])],
                            producer_id=7, producer_epoch=1, base_sequence=3)
    assert native == reference
    assert [(r.key, r.value) for r in iter_records(native)] == rows[start:stop]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.binary(max_size=64), min_size=1, max_size=80), st.integers(1, 1000))
def test_native_partitions_equal_the_python_partitioner(keys, partitions):
    column = pa.array(keys, pa.binary())
    found = column_encoding.key_partitions(_buffers(column), len(keys), partitions)
    expected = [-1 if key is None else partition_for_key(key, partitions) for key in keys]
    assert list(memoryview(found).cast("i")) == expected


def test_buffers_shorter_than_the_rows_are_refused():
    column = pa.array([b"a", b"b"], pa.binary())
    with pytest.raises(ValueError, match="shorter"):
        column_encoding.encode_rows(_buffers(column), _buffers(column), 0, 3)
    validity, offsets, data, offset = _buffers(column)
    with pytest.raises(ValueError, match="outside"):
        column_encoding.encode_rows((None, offsets, b"", 0), (None, offsets, b"", 0), 0, 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=50), st.none() | st.binary(max_size=3000)), min_size=1,
                max_size=80), st.integers(1, 5), st.integers(100, 5000))
def test_sink_sections_cover_the_rows_within_the_batch_size(rows, lead, batch_bytes):
    pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")
    from kafscale.spark_connector.producing import _sections

    keys = pa.array([b"x"] * lead + [k for k, _ in rows], pa.binary()).slice(lead)
    values = pa.array([b"y" * 7] * lead + [v for _, v in rows], pa.binary()).slice(lead)
    sections = list(_sections(keys, values, batch_bytes))
    assert [a for a, _ in sections] == [0] + [b for _, b in sections[:-1]] and sections[-1][1] == len(rows)
    for start, stop in sections:
        size = len(column_encoding.encode_rows(_buffers(keys), _buffers(values), start, stop))
        assert stop - start == 1 or size <= batch_bytes
