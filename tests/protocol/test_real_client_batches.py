"""Record batches written by a real client (librdkafka via confluent-kafka) parse,
validate and decode with our protocol layer, for every codec.

A tiny capture listener built on the protocol layer answers ApiVersions,
Metadata and Produce just well enough for the producer, and keeps the raw
record sets it receives.
"""

import socket
import threading

import pytest

from kafscale.protocol import FrameDecoder, decode_request, encode_frame, encode_response
from kafscale.protocol.entities import build
from kafscale.protocol.messages import response_class
from kafscale.protocol.records import iter_records, validate_record_set

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a test dependency")

TOPIC = "captured"
# Fetch is advertised (never called) because librdkafka enables message format v2
# only when the broker has both Produce v3+ and Fetch v4+, and lz4 only when it
# has FindCoordinator (its proxy for a 0.9+ broker).
CAPTURE_VERSIONS = {0: (3, 9), 1: (4, 11), 3: (0, 12), 10: (0, 0), 18: (0, 3)}


class CaptureListener:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.record_sets: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        with conn:
            while data := conn.recv(65536):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not None:
                    request = decode_request(frame)
                    response = self._answer(request)
                    if response is not None:
                        conn.sendall(encode_frame(encode_response(request.header, response)))

    def _answer(self, request):
        key, version = request.header.api_key, request.header.api_version
        cls = response_class(key, version)
        if key == 18:
            api_keys = [dict(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in CAPTURE_VERSIONS.items()]
            return build(cls, dict(error_code=0, api_keys=api_keys, throttle_time=0))
        if key == 3:
            partition = dict(error_code=0, partition_index=0, leader_id=1, leader_epoch=0,
                             replica_nodes=[1], isr_nodes=[1], offline_replicas=[])
            return build(cls, dict(
                throttle_time=0, cluster_id="capture", controller_id=1,
                brokers=[dict(node_id=1, host="127.0.0.1", port=self.port)],
                topics=[dict(error_code=0, name=TOPIC, topic_id=None, partitions=[partition])],
            ))
        if key == 0:
            responses = []
            for topic in request.body.topic_data:
                parts = []
                for part in topic.partition_data:
                    self.record_sets.append(bytes(part.records))
                    parts.append(dict(index=part.index, error_code=0, base_offset=0, log_append_time=None,
                                      log_start_offset=0, record_errors=[]))
                responses.append(dict(name=topic.name, partition_responses=parts))
            return None if request.body.acks == 0 else build(cls, dict(responses=responses, throttle_time=0))
        raise AssertionError(f"capture listener got api key {key}")


@pytest.fixture
def listener():
    server = CaptureListener()
    yield server
    server.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_validate_and_decode(listener, codec):
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{listener.port}",
        "compression.type": codec,
        "linger.ms": 50,
        "acks": "all",
    })
    sent = [(f"key-{i}".encode(), (f"value-{i}-" * 20).encode(), [("h", f"{i}".encode())]) for i in range(200)]
    for key, value, headers in sent:
        producer.produce(TOPIC, key=key, value=value, headers=headers, partition=0, timestamp=1_700_000_000_000 + len(key))
    assert producer.flush(20) == 0

    received = []
    codecs_seen = set()
    for record_set in listener.record_sets:
        for header in validate_record_set(record_set):
            codecs_seen.add(header.compression)
            received.extend(iter_records(record_set, header))
    expected_codec = ["none", "gzip", "snappy", "lz4", "zstd"].index(codec)
    assert codecs_seen == {expected_codec}
    assert [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in received] == [
        (k, v, h) for k, v, h in sent
    ]
    assert all(r.timestamp == 1_700_000_000_000 + len(r.key) for r in received)
