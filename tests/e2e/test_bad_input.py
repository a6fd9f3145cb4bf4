"""Bad input gets a Kafka error code or a closed connection, never a crash or a hang,
and the gateway keeps serving every other connection."""

import socket
import struct

import pytest
from confluent_kafka import Producer
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records

from kafscale.protocol import Compression, ErrorCode, build_batch, encode_frame
from kafscale.protocol.entities import build
from kafscale.protocol.messages import RequestHeader, decode_response, encode_request, request_class


@pytest.fixture
def sock(gateway):
    connection = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    yield connection
    connection.close()


def _read_frame(sock) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def _call(sock, api_key, version, body, correlation_id=1):
    sock.sendall(encode_frame(encode_request(RequestHeader(api_key, version, correlation_id, "t"), body)))
    payload = _read_frame(sock)
    assert payload is not None, "connection closed instead of answering"
    return decode_response(api_key, version, payload)


def _assert_closed(sock):
    sock.settimeout(10)
    try:
        assert sock.recv(1) == b""
    except ConnectionResetError:
        pass


def _assert_still_serving(gateway):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    producer.produce("healthy", value=b"ok")
    assert producer.flush(10) == 0


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x05hello",                      # a frame too short for a header
    b"\x00\x00\x00\x0a\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff",  # Metadata v12 with a truncated body
    struct.pack(">i", -1),                         # negative size
    struct.pack(">i", 2**31 - 1),                  # absurd size: refused before buffering
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",          # not Kafka at all
    encode_frame(bytes.fromhex("0023000200000001000163000301d5ffffff1f0000029171e7b12900bea14b000082d5000003d0000618")),  # an array length that made kio abort the process
])
def test_garbage_closes_only_that_connection(gateway, sock, garbage):
    sock.sendall(garbage)
    _assert_closed(sock)
    _assert_still_serving(gateway)
    assert "kafscale_protocol_errors_total" in gateway.metrics()


def test_unknown_api_key_closes_the_connection(gateway, sock):
    sock.sendall(encode_frame(struct.pack(">hhih", 9999, 0, 7, -1)))
    _assert_closed(sock)
    _assert_still_serving(gateway)


def test_unknown_api_versions_version_is_answered_in_v0(gateway, sock):
    frame = encode_request(RequestHeader(18, 3, 42, "t"), ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    frame = frame[:2] + struct.pack(">h", 77) + frame[4:]
    sock.sendall(encode_frame(frame))
    correlation_id, body = decode_response(18, 0, _read_frame(sock))
    assert correlation_id == 42
    assert body.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 0 for k in body.api_keys)


def _produce_body(records: bytes, topic="bad", acks=-1):
    return ProduceRequest(transactional_id=None, acks=acks, timeout=__import__("datetime").timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=0, records=Records(records)),)),))


def _partition_error(response):
    return response.responses[0].partition_responses[0].error_code


def test_wrong_crc_is_corrupt_message_and_nothing_is_stored(gateway, sock):
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[-1] ^= 0xFF
    _, response = _call(sock, 0, 9, _produce_body(bytes(batch)))
    assert _partition_error(response) == ErrorCode.corrupt_message
    good = build_batch([(b"k", b"v")], compression=Compression.GZIP)
    _, response = _call(sock, 0, 9, _produce_body(good), correlation_id=2)
    assert _partition_error(response) == ErrorCode.none
    assert response.responses[0].partition_responses[0].base_offset == 0  # the bad batch took no offset


def test_oversized_batch_is_message_too_large(gateway, sock):
    big = build_batch([(None, b"x" * 2_000_000)])
    _, response = _call(sock, 0, 9, _produce_body(big))
    assert _partition_error(response) == ErrorCode.message_too_large


def test_invalid_acks_and_missing_partition(gateway, sock):
    _, response = _call(sock, 0, 9, _produce_body(build_batch([(b"k", b"v")]), acks=5))
    assert _partition_error(response) == ErrorCode.invalid_required_acks
    body = ProduceRequest(transactional_id=None, acks=-1, timeout=__import__("datetime").timedelta(seconds=5),
                          topic_data=(TopicProduceData(name="bad", partition_data=(
                              PartitionProduceData(index=99, records=Records(build_batch([(b"k", b"v")]))),)),))
    _, response = _call(sock, 0, 9, body, correlation_id=2)
    assert _partition_error(response) == ErrorCode.unknown_topic_or_partition


def test_invalid_topic_name_in_metadata(gateway, sock):
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="bad/name"),),
                           allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    _, response = _call(sock, 3, 12, body)
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_fetch_out_of_range_and_unknown_topic(gateway, sock):
    _call(sock, 0, 9, _produce_body(build_batch([(b"k", b"v")]), topic="f"))
    fetch = build(request_class(1, 12), dict(
        replica_id=-1, max_wait=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[
            dict(topic="f", partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=50,
                                             last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)]),
            dict(topic="nope", partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)]),
        ], forgotten_topics_data=[], rack_id=""))
    _, response = _call(sock, 1, 12, fetch, correlation_id=2)
    errors = {r.topic: r.partitions[0].error_code for r in response.responses}
    assert errors == {"f": ErrorCode.offset_out_of_range, "nope": ErrorCode.unknown_topic_or_partition}
    assert response.responses[0].partitions[0].high_watermark == 1
