"""__consumer_offsets records in Kafka's schemas: Java's String.hashCode placement, and keys
and values that parse back to what was written (hypothesis)."""

from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol.group_records import (
    GroupMember,
    group_metadata_key,
    group_metadata_value,
    java_string_hash,
    offset_commit_key,
    offset_commit_value,
    offsets_partition,
    parse_key,
    parse_offset_commit_value,
)

names = st.text(min_size=0, max_size=40)


def test_java_string_hash_and_kafkas_partition_rule():
    assert java_string_hash("hello") == 99162322  # Java: "hello".hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("😀") == 0xD83D * 31 + 0xDE00  # two UTF-16 units, as Java counts them
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Utils.abs(MIN_VALUE) is 0
    assert offsets_partition("polygenelubricants", 50) == 0
    assert all(0 <= offsets_partition(f"group-{i}", 50) < 50 for i in range(200))


@given(names, names, st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1), st.integers(-1, 2**31 - 1),
       st.none() | names, st.integers(0, 2**63 - 1))
def test_offset_commit_records_round_trip(group, topic, partition, offset, epoch, metadata, commit_ms):
    assert parse_key(offset_commit_key(group, topic, partition)) == (group, topic, partition)
    value = offset_commit_value(offset, epoch, metadata, commit_ms)
    assert parse_offset_commit_value(value) == (offset, epoch, metadata or "", commit_ms)


@given(names)
def test_group_metadata_key(group):
    assert parse_key(group_metadata_key(group)) == (group,)


def test_group_metadata_value_layout():
    member = GroupMember("m-1", None, "client", "/127.0.0.1", 300_000, 45_000, b"sub", b"assign")
    value = group_metadata_value("consumer", 3, "range", "m-1", 1_700_000_000_000, [member])
    # version 3, "consumer", generation 3, "range", "m-1", timestamp, one member
    assert value.startswith(b"\x00\x03\x00\x08consumer\x00\x00\x00\x03\x00\x05range\x00\x03m-1")
    assert value.endswith(b"\x00\x00\x00\x03sub\x00\x00\x00\x06assign")
