"""What a topic's configs ask of produced batches: keys on compacted topics (Produce v8+
names the records at fault), CreateTime bounds, the topic's codec, LogAppendTime."""

import time

import pytest

from devkit.wire_client import Client, create_topic, start_gateway
from devkit.wire_client import fetch as _fetch
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.compression import Compression
from kafscale.protocol.entities import build, to_millis
from kafscale.protocol.messages import request_class
from kafscale.protocol.records import Record, iter_records, split_batches


async def _produce_one(client, topic, batch, version=9):
    request = build(request_class(0, version), dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[
        dict(name=topic, partition_data=[dict(index=0, records=batch)])]))
    body = await client.call(0, version, request)
    return body.responses[0].partition_responses[0]


async def _stored(client, topic):
    body = await client.call(1, 12, _fetch(topic, 0, 0))
    data = bytes(body.responses[0].partitions[0].records or b"")
    return [(header, list(iter_records(data[header.position:header.position + header.size], header.at(position=0))))
            for header in split_batches(data)]


@pytest.mark.parametrize("version", [3, 8, 9])
async def test_a_compacted_topic_refuses_records_without_a_key_and_stores_nothing_of_the_batch(nursery, version):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "c", cleanup_policy="compact")
    answer = await _produce_one(client, "c", build_batch([(b"k", b"1"), (None, b"2"), (b"k", b"3"), (None, b"4")]),
                                version)
    assert answer.error_code == ErrorCode.invalid_record
    if version >= 8:
        assert [e.batch_index for e in answer.record_errors] == [1, 3]
        assert "without a key" in answer.record_errors[0].batch_index_error_message
    assert (await _produce_one(client, "c", build_batch([(b"k", b"5"), (b"j", None)]), version)).error_code == 0
    stored = await _stored(client, "c")
    assert [(r.key, r.value) for _, records in stored for r in records] == [(b"k", b"5"), (b"j", None)]
    assert stored[0][0].base_offset == 0  # the refused batch took no offsets


async def test_a_delete_topic_takes_records_without_a_key(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "d", cleanup_policy="delete")
    assert (await _produce_one(client, "d", build_batch([(None, b"x")]))).error_code == ErrorCode.none


async def test_create_time_outside_the_topics_bounds_is_refused(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t", message_timestamp_before_max_ms="60000", message_timestamp_after_max_ms="1000")
    now = int(time.time() * 1000)
    old = build_batch([Record(0, now, b"a", b"1"), Record(1, now - 3_600_000, b"b", b"2")])
    answer = await _produce_one(client, "t", old)
    assert answer.error_code == ErrorCode.invalid_timestamp and [e.batch_index for e in answer.record_errors] == [1]
    future = build_batch([Record(0, now + 60_000, b"a", b"1")])
    assert (await _produce_one(client, "t", future)).error_code == ErrorCode.invalid_timestamp
    assert (await _produce_one(client, "t", build_batch([Record(0, now, b"a", b"1")]))).error_code == 0


async def test_log_append_time_stamps_each_batch_with_the_gateways_clock(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "la", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    answer = await _produce_one(client, "la", build_batch([Record(0, 5, b"a", b"1"), Record(1, 6, b"b", b"2")]))
    after = int(time.time() * 1000)
    assert answer.error_code == 0 and before <= to_millis(answer.log_append_time) <= after
    [(header, records)] = await _stored(client, "la")
    assert header.log_append_time and header.max_timestamp == to_millis(answer.log_append_time)
    assert [r.value for r in records] == [b"1", b"2"]


@pytest.mark.parametrize("codec, sent", [("zstd", Compression.NONE), ("uncompressed", Compression.GZIP),
                                          ("lz4", Compression.SNAPPY)])
async def test_the_topics_codec_recompresses_batches_sent_in_another(nursery, codec, sent):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "z", compression_type=codec)
    values = [(b"k%d" % i, b"v" * i) for i in range(50)]
    assert (await _produce_one(client, "z", build_batch(values, compression=sent))).error_code == 0
    [(header, records)] = await _stored(client, "z")
    assert header.compression == {"zstd": 4, "uncompressed": 0, "lz4": 3}[codec]
    assert [(r.key, r.value) for r in records] == values


async def test_clients_may_not_write_control_or_transactional_batches(nursery):
    """A forged transaction marker is INVALID_RECORD; a transactional batch without a
    transactional id is refused as Kafka refuses it (transactions are not served yet)."""
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "x")
    marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], producer_id=3, producer_epoch=0,
                         control=True)
    assert (await _produce_one(client, "x", marker)).error_code == ErrorCode.invalid_record
    transactional = build_batch([(b"k", b"v")], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
    answer = await _produce_one(client, "x", transactional)
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    assert (await _stored(client, "x")) == []
