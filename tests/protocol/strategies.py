"""Hypothesis strategies shared by the protocol tests."""

from hypothesis import strategies as st

from kafscale.protocol.compression import Compression
from kafscale.protocol.records import Record, RecordHeader

nullable_bytes = st.none() | st.binary(max_size=64)
header_keys = st.text(max_size=12)


@st.composite
def record_lists(draw, max_size=20):
    count = draw(st.integers(min_value=1, max_value=max_size))
    base_offset = draw(st.integers(min_value=0, max_value=2**40))
    base_timestamp = draw(st.integers(min_value=0, max_value=2**42))
    records = []
    offset = base_offset
    for _ in range(count):
        records.append(
            Record(
                offset,
                base_timestamp + draw(st.integers(min_value=-1000, max_value=10**6)),
                draw(nullable_bytes),
                draw(nullable_bytes),
                tuple(
                    RecordHeader(draw(header_keys), draw(nullable_bytes))
                    for _ in range(draw(st.integers(min_value=0, max_value=3)))
                ),
            )
        )
        offset += draw(st.integers(min_value=1, max_value=3))  # compacted gaps
    return records


codecs = st.sampled_from(list(Compression))
