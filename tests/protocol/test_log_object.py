"""A shared log object round trip: what a flush encodes (several partitions, several appended
record sets each, stamped, some LogAppendTime) reads back entry by entry, each entry's CRC
(taken from its batches' own) checked against its bytes as a reader does."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol.log_object import LogObjectBuilder, parse_directory, read_entry
from kafscale.protocol.record_policy import stamp_log_append_time
from kafscale.protocol.records import build_batch, restamp, split_batches

from .strategies import codecs, record_lists


@st.composite
def appends(draw):
    """Per partition, one to three record sets of one or two batches; some stamped LogAppendTime."""
    partitions = []
    for _ in range(draw(st.integers(1, 3))):
        record_sets = []
        for _ in range(draw(st.integers(1, 3))):
            batches = [build_batch([record._replace(offset=i) for i, record in enumerate(draw(record_lists(max_size=5)))],
                                   compression=draw(codecs)) for _ in range(draw(st.integers(1, 2)))]
            record_sets.append((bytearray(b"".join(batches)), draw(st.booleans())))
        partitions.append(record_sets)
    return partitions


@settings(max_examples=150)
@given(partitions=appends(), first_offset=st.integers(0, 2**40))
def test_every_entry_of_an_encoded_log_object_reads_back_and_passes_its_crc(partitions, first_offset):
    builder = LogObjectBuilder()
    expected = {}
    for partition, record_sets in enumerate(partitions):
        offset = first_offset
        for data, append_time in record_sets:
            headers = split_batches(data)
            if append_time:
                headers = [stamp_log_append_time(data, header, 1_700_000_000_000) for header in headers]
            stamped = restamp(data, headers, offset)
            offset = stamped[-1].last_offset + 1
            builder.append("topic", partition, data, stamped)
            expected.setdefault(partition, []).append(bytes(data))
    data, directory = builder.encode("~log/0-ab/1.kfl", 1, 5)
    assert parse_directory(directory.key, data[directory_start(data):]) == directory
    for entry in directory.entries:
        stored = data[entry.position:entry.position + entry.length]
        assert stored == b"".join(expected[entry.partition])
        read = read_entry(entry, stored)  # raises unless the entry's CRC is its bytes'
        assert read.batches[0].base_offset == first_offset == entry.base_offset


def directory_start(data: bytes) -> int:
    return int.from_bytes(data[-24:-16], "big")
