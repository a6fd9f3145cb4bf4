"""The hand-written Produce answer encoder equals kio's on every served version."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafscale.protocol.api_versions import SERVED_VERSIONS, ApiKey
from kafscale.protocol.entities import build
from kafscale.protocol.messages import RequestHeader, decode_response, encode_response, response_class
from kafscale.protocol.produce_response import (
    ProduceAnswer,
    ProducePartition,
    ProduceTopic,
    encode_produce_response,
)
from kafscale.protocol.response_fields import Endpoint

_PRODUCE = SERVED_VERSIONS[ApiKey.PRODUCE]
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(max_size=140)  # past 127 bytes: two-byte varint lengths

_partitions = st.builds(
    ProducePartition, index=_I32, error_code=st.sampled_from([0, 2, 6, 10, 32, 87]), base_offset=_I64,
    log_append_time=st.integers(-1, 253402300799999), log_start_offset=_I64,  # kio: -1, or a date before year 10000
    record_errors=st.lists(st.tuples(_I32, st.none() | _text), max_size=3),
    error_message=st.none() | _text, current_leader=st.none() | st.tuples(_I32, _I32))
_topics = st.builds(ProduceTopic, name=st.text(max_size=12), partitions=st.lists(_partitions, max_size=3),
                    topic_id=st.none() | st.uuids())
_endpoints = st.builds(Endpoint, node_id=_I32, host=st.text(min_size=1, max_size=12),
                       port=st.integers(0, 65535), rack=st.none() | st.text(max_size=6))
_answers = st.builds(ProduceAnswer, topics=st.lists(_topics, max_size=3), throttle_time_ms=st.integers(0, 2**31 - 1),
                     node_endpoints=st.lists(_endpoints, max_size=2))


def _as_kio(version: int, answer: ProduceAnswer):
    def partition(p: ProducePartition) -> dict:
        values = dict(index=p.index, error_code=p.error_code, base_offset=p.base_offset,
                      log_append_time=p.log_append_time, log_start_offset=p.log_start_offset,
                      record_errors=[dict(batch_index=i, batch_index_error_message=m) for i, m in p.record_errors],
                      error_message=p.error_message)
        if p.current_leader is not None:
            values["current_leader"] = dict(leader_id=p.current_leader[0], leader_epoch=p.current_leader[1])
        return values

    return build(response_class(ApiKey.PRODUCE, version), dict(
        throttle_time=answer.throttle_time_ms,
        responses=[dict(name=t.name, topic_id=t.topic_id or uuid.UUID(int=0),
                        partition_responses=[partition(p) for p in t.partitions]) for t in answer.topics],
        node_endpoints=[dict(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                        for e in answer.node_endpoints]))


@pytest.mark.parametrize("version", range(_PRODUCE.min_version, _PRODUCE.max_version + 1))
@settings(max_examples=40, deadline=None)
@given(answer=_answers, correlation_id=_I32)
def test_produce_answers_encode_as_kio_does_on_every_served_version(version, answer, correlation_id):
    header = RequestHeader(ApiKey.PRODUCE, version, correlation_id, "c")
    payload = encode_produce_response(correlation_id, version, answer)
    assert payload == encode_response(header, _as_kio(version, answer))
    decoded_id, body = decode_response(ApiKey.PRODUCE, version, payload)
    assert decoded_id == correlation_id
    assert [p.base_offset for t in body.responses for p in t.partition_responses] == [
        p.base_offset for t in answer.topics for p in t.partitions]
