"""The hand-written Fetch answer encoder equals kio's on every served version, and hands
the stored batches over as they are (the same buffers, not copies)."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol.api_versions import SERVED_VERSIONS, ApiKey
from kafscale.protocol.entities import build
from kafscale.protocol.fetch_response import FetchAnswer, FetchPartition, FetchTopic, encode_fetch_response
from kafscale.protocol.messages import RequestHeader, decode_response, encode_response, response_class
from kafscale.protocol.response_fields import Endpoint

_FETCH = SERVED_VERSIONS[ApiKey.FETCH]
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _records(draw):
    """A partition's stored batches as memoryviews over a few larger buffers."""
    pieces = []
    for data in draw(st.lists(st.binary(max_size=200), max_size=3)):  # lengths past 127: two-byte varints
        cut = draw(st.integers(0, len(data)))
        pieces += [memoryview(data)[:cut], memoryview(data)[cut:]]
    return pieces


_partitions = st.builds(
    FetchPartition, index=_I32, error_code=st.sampled_from([0, 1, 3, 6, 74, 100]), high_watermark=_I64,
    last_stable_offset=_I64, log_start_offset=_I64, records=_records(),
    aborted=st.none() | st.lists(st.tuples(_I64, _I64), max_size=3),
    current_leader=st.none() | st.tuples(_I32, _I32))
_topics = st.builds(FetchTopic, name=st.text(max_size=12), topic_id=st.uuids(),
                    partitions=st.lists(_partitions, max_size=3))
_endpoints = st.builds(Endpoint, node_id=_I32, host=st.text(min_size=1, max_size=12),
                       port=st.integers(0, 65535), rack=st.none() | st.text(max_size=6))
_answers = st.builds(FetchAnswer, topics=st.lists(_topics, max_size=3), error_code=st.sampled_from([0, 1, 15]),
                     session_id=_I32, throttle_time_ms=st.integers(0, 2**31 - 1),
                     node_endpoints=st.lists(_endpoints, max_size=2))


def _as_kio(version: int, answer: FetchAnswer):
    def partition(p: FetchPartition) -> dict:
        values = dict(partition_index=p.index, error_code=p.error_code, high_watermark=p.high_watermark,
                      last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                      aborted_transactions=None if p.aborted is None else [
                          dict(producer_id=producer, first_offset=first) for producer, first in p.aborted],
                      preferred_read_replica=-1, records=b"".join(p.records))
        if p.current_leader is not None:
            values["current_leader"] = dict(leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
        return values

    return build(response_class(ApiKey.FETCH, version), dict(
        throttle_time=answer.throttle_time_ms, error_code=answer.error_code, session_id=answer.session_id,
        responses=[dict(topic=t.name, topic_id=t.topic_id, partitions=[partition(p) for p in t.partitions])
                   for t in answer.topics],
        node_endpoints=[dict(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                        for e in answer.node_endpoints]))


@pytest.mark.parametrize("version", range(_FETCH.min_version, _FETCH.max_version + 1))
@settings(max_examples=25, deadline=None)
@given(answer=_answers, correlation_id=_I32)
def test_fetch_answers_encode_as_kio_does_on_every_served_version(version, answer, correlation_id):
    header = RequestHeader(ApiKey.FETCH, version, correlation_id, "c")
    pieces = encode_fetch_response(correlation_id, version, answer)
    payload = b"".join(pieces)
    assert payload == encode_response(header, _as_kio(version, answer))
    assert decode_response(ApiKey.FETCH, version, payload)[0] == correlation_id
    # The stored batches go out as the very buffers given (no copy), the rest in few runs.
    stored = [piece for t in answer.topics for p in t.partitions for piece in p.records if len(piece)]
    handed = [piece for piece in pieces if isinstance(piece, memoryview)]
    assert len(handed) == len(stored) and all(a is b for a, b in zip(handed, stored, strict=True))
    assert len(pieces) <= 2 * len(stored) + 1


def test_a_topic_id_version_without_an_id_sends_zeros():
    answer = FetchAnswer([FetchTopic("t", None, [FetchPartition(0, 0)])])
    payload = b"".join(encode_fetch_response(7, 13, answer))
    assert uuid.UUID(int=0).bytes in payload
    assert decode_response(ApiKey.FETCH, 13, payload)[1].responses[0].topic_id in (None, uuid.UUID(int=0))
