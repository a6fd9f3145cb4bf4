"""The old versions Kafka 3.9 serves, against an in-process gateway: frames written in the
legacy layouts by this test (tests/protocol/test_legacy_versions.py's schema walker), as a
client of that age sends them, answered in those layouts."""

import struct

from devkit.wire_client import Client, produce, start_gateway
from kafscale.protocol import ErrorCode, build_batch, encode_frame
from kafscale.protocol.records import Record
from tests.protocol.test_legacy_versions import ANSWERS, REQUESTS, _decode, _encode

# Answer layouts identical to their target's, as Kafka 3.9's JSON files give them.
OFFSET_COMMIT_ANSWER = [("topics", ("array", [("name", "string"), ("partitions", ("array", [
    ("partition_index", "int32"), ("error_code", "int16")]))]))]
OFFSET_FETCH_V0 = [("group_id", "string"), ("topics", ("array", [("name", "string"), ("partition_indexes", ("prims", "int32"))]))]
OFFSET_FETCH_V0_ANSWER = [("topics", ("array", [("name", "string"), ("partitions", ("array", [
    ("partition_index", "int32"), ("committed_offset", "int64"), ("metadata", "nstring"), ("error_code", "int16")]))]))]
DELETE_TOPICS_V0 = [("topic_names", ("prims", "string")), ("timeout", "int32")]


async def _call(client, key, version, schema, values, answer, correlation_id=5):
    frame = struct.pack(">hhih", key, version, correlation_id, 1) + b"c" + _encode(schema, values)
    await client.stream.send_all(encode_frame(frame))
    payload = await client.receive()
    assert payload is not None, f"api {key} v{version}: the gateway closed the connection"
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    decoded, end = _decode(answer, payload, 4)
    assert end == len(payload)
    return decoded


async def test_a_client_of_kafka_0_10_commits_lists_and_administers(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    batch = bytes(build_batch([Record(i, 1000 + i, None, b"v%d" % i) for i in range(3)]))
    answer = await client.call(0, 9, produce("t", batch))
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none

    listed = await _call(client, 2, 0, REQUESTS[(2, 0)][0], dict(replica_id=-1, topics=[dict(name="t", partitions=[
        dict(partition_index=0, timestamp=-1, max_num_offsets=1)])]), ANSWERS[(2, 0)][0])
    assert listed["topics"][0]["partitions"][0] == dict(partition_index=0, error_code=0, old_style_offsets=[3])

    # sarama's V2_1_0_0 consumer group commits with v1; simple consumers with v0.
    for version, extra in ((0, {}), (1, dict(generation_id_or_member_epoch=-1, member_id=""))):
        partition = dict(partition_index=0, committed_offset=version + 1, committed_metadata="m")
        if version == 1:
            partition["commit_timestamp"] = -1
        committed = await _call(client, 8, version, REQUESTS[(8, version)][0],
                                dict(group_id="g", **extra, topics=[dict(name="t", partitions=[partition])]),
                                OFFSET_COMMIT_ANSWER)
        assert committed["topics"][0]["partitions"][0]["error_code"] == 0
        fetched = await _call(client, 9, 0, OFFSET_FETCH_V0, dict(group_id="g", topics=[dict(name="t", partition_indexes=[0])]),
                              OFFSET_FETCH_V0_ANSWER)
        assert fetched["topics"][0]["partitions"][0] == dict(partition_index=0, committed_offset=version + 1,
                                                             metadata="m", error_code=0)

    created = await _call(client, 19, 0, REQUESTS[(19, 0)][0], dict(topics=[dict(
        name="new", num_partitions=2, replication_factor=1, assignments=[], configs=[])], timeout=5000),
        ANSWERS[(19, 0)][0])
    assert created == dict(topics=[dict(name="new", error_code=0)])
    described = await _call(client, 32, 0, REQUESTS[(32, 0)][0], dict(resources=[dict(
        resource_type=2, resource_name="new", configuration_keys=["segment.bytes", "cleanup.policy"])]),
        ANSWERS[(32, 0)][0])
    result = described["results"][0]
    assert result["error_code"] == 0
    assert {c["name"]: (c["value"], c["is_default"]) for c in result["configs"]} == {
        "segment.bytes": (str(64 * 2**20), True), "cleanup.policy": ("delete", True)}
    deleted = await _call(client, 20, 0, DELETE_TOPICS_V0, dict(topic_names=["new", "nope"], timeout=5000),
                          ANSWERS[(20, 0)][0])
    assert deleted == dict(responses=[dict(name="new", error_code=0),
                                      dict(name="nope", error_code=ErrorCode.unknown_topic_or_partition)])
    epochs = await _call(client, 23, 0, REQUESTS[(23, 0)][0], dict(topics=[dict(topic="t", partitions=[
        dict(partition=0, leader_epoch=0)])]), ANSWERS[(23, 0)][0])
    assert epochs["topics"][0]["partitions"][0] == dict(error_code=0, partition=0, end_offset=3)
