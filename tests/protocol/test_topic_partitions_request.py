"""DescribeTopicPartitions v0 requests decode by hand (protocol/topic_partitions_request.py):
its nullable cursor struct is written by kio but not read by it. Round trip against kio's
encoder, and every truncation of a valid request is MalformedFrame, never another error."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafscale.protocol.entities import build
from kafscale.protocol.errors import MalformedFrame
from kafscale.protocol.messages import RequestHeader, decode_request, encode_request, request_class

names = st.text(min_size=1, max_size=30)
cursors = st.none() | st.builds(lambda t, p: dict(topic_name=t, partition_index=p), names, st.integers(0, 2**31 - 1))


def _encoded(topics, limit, cursor) -> bytes:
    body = build(request_class(75, 0), dict(topics=[dict(name=n) for n in topics], response_partition_limit=limit,
                                            cursor=cursor))
    return encode_request(RequestHeader(75, 0, 1, "t"), body), body


@given(st.lists(names, max_size=10), st.integers(-(2**31), 2**31 - 1), cursors)
def test_round_trip_against_kio(topics, limit, cursor):
    frame, body = _encoded(topics, limit, cursor)
    assert decode_request(frame, strict=True).body == body


@given(st.lists(names, max_size=4), cursors, st.data())
def test_every_truncation_is_malformed(topics, cursor, data):
    frame, _ = _encoded(topics, 100, cursor)
    cut = data.draw(st.integers(12, len(frame) - 1))  # past the header's client id
    with pytest.raises(MalformedFrame):
        decode_request(frame[:cut], strict=True)
