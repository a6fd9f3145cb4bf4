"""Versions Kafka 3.9 serves that kio no longer generates (protocol/legacy.py), checked
against the layouts of Kafka 3.9's message JSON files, written out here independently:
requests encoded by this test's own schema walker decode into the target version's
body; answers built for the target decode, with the legacy layout, into what a legacy
client expects."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafscale.protocol.api_versions import ApiKey, version_range
from kafscale.protocol.errors import MalformedFrame
from kafscale.protocol.legacy import LEGACY_VERSIONS
from kafscale.protocol.messages import RequestHeader, decode_request, encode_response, response_class

I8, I16, I32, I64 = "int8", "int16", "int32", "int64"
STRING, NSTRING, BOOL = "string", "nstring", "bool"
_FMT = {I8: ">b", I16: ">h", I32: ">i", I64: ">q", BOOL: ">?"}


def A(*fields):  # an array of entities
    return ("array", list(fields))


def P(kind):  # an array of primitives
    return ("prims", kind)


def NP(kind):  # a nullable array of primitives
    return ("nprims", kind)


def _encode(schema, values) -> bytes:
    out = b""
    for name, kind in schema:
        value = values[name]
        if isinstance(kind, tuple) and kind[0] == "array":
            out += struct.pack(">i", len(value)) + b"".join(_encode(kind[1], item) for item in value)
        elif isinstance(kind, tuple):
            if value is None:
                out += struct.pack(">i", -1)
            else:
                out += struct.pack(">i", len(value)) + b"".join(_encode([("x", kind[1])], {"x": v}) for v in value)
        elif kind in (STRING, NSTRING):
            out += struct.pack(">h", -1) if value is None else struct.pack(">h", len(value.encode())) + value.encode()
        else:
            out += struct.pack(_FMT[kind], value)
    return out


def _decode(schema, data, pos=0):
    values = {}
    for name, kind in schema:
        if isinstance(kind, tuple):
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if count < 0:
                values[name] = None
                continue
            items = []
            for _ in range(count):
                item, pos = _decode(kind[1] if kind[0] == "array" else [("x", kind[1])], data, pos)
                items.append(item if kind[0] == "array" else item["x"])
            values[name] = items
        elif kind in (STRING, NSTRING):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            values[name] = None if size < 0 else data[pos: pos + size].decode()
            pos += max(size, 0)
        else:
            (values[name],) = struct.unpack_from(_FMT[kind], data, pos)
            pos += struct.calcsize(_FMT[kind])
    return values, pos


def _strategy(schema):
    def kind_strategy(kind):
        if isinstance(kind, tuple) and kind[0] == "array":
            return st.lists(_strategy(kind[1]), max_size=3)
        if isinstance(kind, tuple):
            inner = st.lists(kind_strategy(kind[1]), max_size=3)
            return st.none() | inner if kind[0] == "nprims" else inner
        return {I8: st.integers(-128, 127), I16: st.integers(-(2**15), 2**15 - 1),
                I32: st.integers(-(2**31), 2**31 - 1), I64: st.integers(-(2**63), 2**63 - 1), BOOL: st.booleans(),
                STRING: st.text(max_size=8), NSTRING: st.none() | st.text(max_size=8)}[kind]

    return st.fixed_dictionaries({name: kind_strategy(kind) for name, kind in schema})


def _plain(value):
    """A kio object as plain values (durations in ms), to compare with the drawn ones."""
    if hasattr(value, "__dataclass_fields__"):
        return {name: _plain(getattr(value, name)) for name in value.__dataclass_fields__ if not name.startswith("__")}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    return int(value) if isinstance(value, int) else value


def _without(values, *dropped):
    return {k: v for k, v in values.items() if k not in dropped}


# (api, version): legacy request layout, and what the target body holds for drawn values.
REQUESTS = {
    (ApiKey.OFFSET_COMMIT, 0): (
        [("group_id", STRING), ("topics", A(("name", STRING), ("partitions", A(
            ("partition_index", I32), ("committed_offset", I64), ("committed_metadata", NSTRING)))))],
        lambda v: {**v, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1}),
    (ApiKey.OFFSET_COMMIT, 1): (
        [("group_id", STRING), ("generation_id_or_member_epoch", I32), ("member_id", STRING),
         ("topics", A(("name", STRING), ("partitions", A(
             ("partition_index", I32), ("committed_offset", I64), ("commit_timestamp", I64),
             ("committed_metadata", NSTRING)))))],
        lambda v: {**v, "retention_time": -1, "topics": [
            {**t, "partitions": [_without(p, "commit_timestamp") for p in t["partitions"]]} for t in v["topics"]]}),
    (ApiKey.LIST_OFFSETS, 0): (
        [("replica_id", I32), ("topics", A(("name", STRING), ("partitions", A(
            ("partition_index", I32), ("timestamp", I64), ("max_num_offsets", I32)))))],
        lambda v: {**v, "topics": [
            {**t, "partitions": [_without(p, "max_num_offsets") for p in t["partitions"]]} for t in v["topics"]]}),
    (ApiKey.CREATE_TOPICS, 0): (
        [("topics", A(("name", STRING), ("num_partitions", I32), ("replication_factor", I16),
                      ("assignments", A(("partition_index", I32), ("broker_ids", P(I32)))),
                      ("configs", A(("name", STRING), ("value", NSTRING))))),
         ("timeout", I32)],
        lambda v: {**v, "validate_only": False}),
    (ApiKey.DESCRIBE_CONFIGS, 0): (
        [("resources", A(("resource_type", I8), ("resource_name", STRING), ("configuration_keys", NP(STRING))))],
        lambda v: {**v, "include_synonyms": False}),
    **{(ApiKey.OFFSET_FOR_LEADER_EPOCH, version): (
        [("topics", A(("topic", STRING), ("partitions", A(("partition", I32), ("leader_epoch", I32)))))],
        lambda v: {"topics": [{**t, "partitions": [{**p, "current_leader_epoch": -1} for p in t["partitions"]]}
                              for t in v["topics"]]}) for version in (0, 1)},
}

# (api, version): legacy answer layout, and what it holds for the target's answer (plain).
_OFFSET_FOR_LEADER_EPOCH_V0 = [("topics", A(("topic", STRING), ("partitions", A(
    ("error_code", I16), ("partition", I32), ("end_offset", I64)))))]
ANSWERS = {
    (ApiKey.LIST_OFFSETS, 0): (
        [("topics", A(("name", STRING), ("partitions", A(
            ("partition_index", I32), ("error_code", I16), ("old_style_offsets", P(I64))))))],
        lambda r: {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": p["error_code"],
             "old_style_offsets": [p["offset"]] if p["error_code"] == 0 and p["offset"] >= 0 else []}
            for p in t["partitions"]]} for t in r["topics"]]}),
    (ApiKey.CREATE_TOPICS, 0): (
        [("topics", A(("name", STRING), ("error_code", I16)))],
        lambda r: {"topics": [_without(t, "error_message") for t in r["topics"]]}),
    (ApiKey.CREATE_TOPICS, 1): (
        [("topics", A(("name", STRING), ("error_code", I16), ("error_message", NSTRING)))],
        lambda r: {"topics": r["topics"]}),
    (ApiKey.DELETE_TOPICS, 0): (
        [("responses", A(("name", STRING), ("error_code", I16)))],
        lambda r: {"responses": r["responses"]}),
    (ApiKey.DESCRIBE_CONFIGS, 0): (
        [("throttle_time", I32), ("results", A(
            ("error_code", I16), ("error_message", NSTRING), ("resource_type", I8), ("resource_name", STRING),
            ("configs", A(("name", STRING), ("value", NSTRING), ("read_only", BOOL), ("is_default", BOOL),
                          ("is_sensitive", BOOL)))))],
        lambda r: {"throttle_time": r["throttle_time"], "results": [
            {**_without(res, "configs"), "configs": [
                {**_without(c, "config_source", "synonyms"), "is_default": c["config_source"] == 5}
                for c in res["configs"]]} for res in r["results"]]}),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): (
        _OFFSET_FOR_LEADER_EPOCH_V0,
        lambda r: {"topics": [{"topic": t["topic"], "partitions": [_without(p, "leader_epoch") for p in t["partitions"]]}
                              for t in r["topics"]]}),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): (
        [("topics", A(("topic", STRING), ("partitions", A(
            ("error_code", I16), ("partition", I32), ("leader_epoch", I32), ("end_offset", I64)))))],
        lambda r: {"topics": r["topics"]}),
}


def test_every_legacy_version_is_served_and_tested():
    for (key, version), legacy in LEGACY_VERSIONS.items():
        assert version in version_range(key)
        assert (legacy.decode is None) == ((key, version) not in REQUESTS)
        assert (legacy.encode is None) == ((key, version) not in ANSWERS)


def _frame(key, version, payload, correlation_id=7):
    return struct.pack(">hhih", key, version, correlation_id, 1) + b"c" + payload


@pytest.mark.parametrize(("api_key", "version"), list(REQUESTS), ids=str)
@settings(max_examples=25, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_legacy_requests_decode_into_the_target_version(api_key, version, data):
    schema, expected = REQUESTS[(api_key, version)]
    values = data.draw(_strategy(schema))
    request = decode_request(_frame(api_key, version, _encode(schema, values)), strict=True)
    assert request.header.api_version == version
    assert _plain(request.body) == expected(values)
    # Cut anywhere, or with an absurd count, it is refused as malformed: never a crash.
    payload = _encode(schema, values)
    for cut in range(len(payload)):
        with pytest.raises(MalformedFrame):
            decode_request(_frame(api_key, version, payload[:cut]))


@pytest.mark.parametrize(("api_key", "version"), list(ANSWERS), ids=str)
@settings(max_examples=25, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_answers_for_the_target_are_written_in_the_legacy_layout(api_key, version, data):
    schema, expected = ANSWERS[(api_key, version)]
    response = data.draw(st.from_type(response_class(api_key, version)))
    payload = encode_response(RequestHeader(api_key, version, 99, "c"), response)
    assert struct.unpack_from(">i", payload)[0] == 99
    decoded, end = _decode(schema, payload, 4)
    assert end == len(payload)
    assert decoded == expected(_plain(response))


def test_an_array_count_beyond_the_frame_is_refused_before_reading():
    payload = struct.pack(">h", 1) + b"g" + struct.pack(">i", 2**31 - 1)  # OffsetCommit v0: group, topics
    with pytest.raises(MalformedFrame, match="cannot fit"):
        decode_request(_frame(ApiKey.OFFSET_COMMIT, 0, payload))
