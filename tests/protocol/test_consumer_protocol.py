"""The consumer's embedded protocol: what classic members send in JoinGroup and receive in
SyncGroup, read and written by the coordinator when a consumer group hosts them."""

import io
import struct

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_protocol_subscription.v0 import data as v0
from kio.schema.consumer_protocol_subscription.v1 import data as v1
from kio.schema.consumer_protocol_subscription.v3 import data as v3
from kio.serial import entity_writer

from kafscale.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment

topics = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)
assignments = st.dictionaries(topics, st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=5), max_size=5)


@given(assignments)
def test_an_assignment_reads_back_as_written(assigned):
    assert decode_assignment(encode_assignment(assigned)) == assigned


def _subscription(version: int, module, **values) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    entity_writer(module.ConsumerProtocolSubscription)(out, module.ConsumerProtocolSubscription(**values))
    return out.getvalue()


@given(st.lists(topics, max_size=5, unique=True), assignments)
def test_subscriptions_of_every_version_are_read(names, owned):
    plain = decode_subscription(_subscription(0, v0, topics=tuple(names), user_data=b"u"))
    assert (plain.topics, plain.owned) == (tuple(names), None)  # v0 says nothing of what it owns
    owned_items = tuple(v1.TopicPartition(topic=t, partitions=tuple(sorted(p))) for t, p in owned.items())
    cooperative = decode_subscription(_subscription(1, v1, topics=tuple(names), user_data=None,
                                                    owned_partitions=owned_items))
    assert cooperative.owned == owned
    racked = decode_subscription(_subscription(3, v3, topics=tuple(names), user_data=None, owned_partitions=(),
                                               generation_id=4, rack_id="r1"))
    assert (racked.owned, racked.rack) == ({}, "r1")
    # A newer version is read as the newest known: its added fields come after.
    newest = _subscription(3, v3, topics=tuple(names), user_data=None, owned_partitions=(), generation_id=4,
                           rack_id=None)
    assert decode_subscription(struct.pack(">h", 7) + newest[2:] + b"future").topics == tuple(names)


@given(st.binary(max_size=64))
def test_garbage_is_a_value_error_and_nothing_else(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ValueError:
            pass


def test_absurd_counts_are_refused_at_once():
    huge = struct.pack(">hi", 0, 2**31 - 1)  # two billion topics announced, none sent
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(huge)
        except ValueError as exc:
            assert "unreadable" in str(exc)
        else:
            raise AssertionError("an absurd count was accepted")
