"""Topic configs: defaults derived from the broker config, and IncrementalAlterConfigs on lists."""

import pytest

from devkit.wire_client import Client, start_gateway
from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class

TOPIC, DEFAULT_CONFIG, STATIC_BROKER_CONFIG, TOPIC_CONFIG = 2, 5, 4, 1
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _describe(client, topic):
    body = await client.call(32, 4, build(request_class(32, 4), dict(
        resources=[dict(resource_type=TOPIC, resource_name=topic, configuration_keys=None)],
        include_synonyms=False, include_documentation=False)))
    return {entry.name: (entry.value, entry.config_source) for entry in body.results[0].configs}


async def _alter(client, topic, *operations):
    body = await client.call(44, 1, build(request_class(44, 1), dict(resources=[dict(
        resource_type=TOPIC, resource_name=topic,
        configs=[dict(name=name, config_operation=op, value=value) for name, op, value in operations])],
        validate_only=False)))
    return body.responses[0].error_code


async def _topic(client, name):
    body = await client.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout=5000, validate_only=False)))
    assert body.topics[0].error_code == ErrorCode.none


@pytest.mark.parametrize("size, source", [(2 * 2**20, STATIC_BROKER_CONFIG), (None, DEFAULT_CONFIG)])
async def test_topic_defaults_come_from_the_broker_config(nursery, size, source):
    overrides = {"segment_bytes": size, "max_message_bytes": size} if size else {}
    running, _ = await start_gateway(nursery, **overrides)
    client = await Client.connect(running.port)
    await _topic(client, "t")
    configs = await _describe(client, "t")
    config = running.context.config
    assert configs["segment.bytes"] == (str(config.log.segment_bytes), source)
    assert configs["max.message.bytes"] == (str(config.log.max_message_bytes), source)
    assert configs["retention.ms"] == ("604800000", DEFAULT_CONFIG)
    assert running.context.logs.max_message_bytes("t") == config.log.max_message_bytes
    assert await _alter(client, "t", ("segment.bytes", SET, "4194304")) == ErrorCode.none
    assert (await _describe(client, "t"))["segment.bytes"] == ("4194304", TOPIC_CONFIG)


async def test_append_and_subtract_on_a_list_config(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await _topic(client, "l")
    # Appending what is there already changes nothing.
    assert await _alter(client, "l", ("cleanup.policy", APPEND, "delete")) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("delete", TOPIC_CONFIG)
    assert await _alter(client, "l", ("cleanup.policy", APPEND, "compact")) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("delete,compact", TOPIC_CONFIG)
    assert running.context.logs.policy(running.context.logs.topics()["l"]).compact
    assert await _alter(client, "l", ("cleanup.policy", SUBTRACT, "delete")) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("compact", TOPIC_CONFIG)
    assert not running.context.logs.policy(running.context.logs.topics()["l"]).delete
    assert await _alter(client, "l", ("cleanup.policy", APPEND, "shrink")) == ErrorCode.invalid_config
    assert await _alter(client, "l", ("cleanup.policy", SUBTRACT, "compact")) == ErrorCode.none
    assert await _alter(client, "l", ("retention.ms", APPEND, "5")) == ErrorCode.invalid_config  # not a list
    assert await _alter(client, "l", ("cleanup.policy", DELETE, None)) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("delete", DEFAULT_CONFIG)


# Every topic config Kafka 3.9 accepts, with a valid value (what Strimzi, Terraform and
# topic scripts set), and values Kafka's validation refuses.
_KAFKA_39_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete", "compression.type": "zstd", "compression.gzip.level": "5",
    "compression.lz4.level": "9", "compression.zstd.level": "3", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "60000", "flush.messages": "10000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1,1:2", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "600000", "max.message.bytes": "2000000", "message.downconversion.enable": "false",
    "message.format.version": "2.8", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.1",
    "min.compaction.lag.ms": "0", "min.insync.replicas": "2", "preallocate": "false",
    "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
    "retention.bytes": "1073741824", "retention.ms": "86400000", "segment.bytes": "1048576",
    "segment.index.bytes": "10485760", "segment.jitter.ms": "0", "segment.ms": "3600000",
    "unclean.leader.election.enable": "false",
}


async def _create(client, name, configs):
    body = await client.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=1, replication_factor=3, assignments=[],
                     configs=[dict(name=k, value=v) for k, v in configs.items()])],
        timeout=5000, validate_only=False)))
    return body.topics[0].error_code, body.topics[0].error_message


# Kafscale's own (Large File Support, docs/lfs.md), set and described like Kafka's.
_KAFSCALE_TOPIC_CONFIGS = {
    "kafscale.lfs.enabled": "true", "kafscale.lfs.min_bytes": "1048576", "kafscale.lfs.bucket": "media",
    "kafscale.lfs.prefix": "lfs-objects", "kafscale.lfs.require_sdk": "true",
}


async def test_every_kafka_topic_config_is_accepted_and_reported(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    every = {**_KAFKA_39_TOPIC_CONFIGS, **_KAFSCALE_TOPIC_CONFIGS}
    assert await _create(client, "all", every) == (ErrorCode.none, None)
    described = await _describe(client, "all")
    assert {name: value for name, (value, _) in described.items()} == every
    assert {source for _, source in described.values()} == {TOPIC_CONFIG}
    policy = running.context.logs.policy(running.context.logs.topics()["all"])
    assert policy.compact and policy.delete and policy.log_append_time and policy.compression == "zstd"
    assert (policy.lfs.enabled, policy.lfs.min_bytes, policy.lfs.bucket, policy.lfs.prefix, policy.lfs.require_sdk) \
        == (True, 1 << 20, "media", "lfs-objects", True)


@pytest.mark.parametrize("name, value", [
    ("cleanup.policy", "compact,shred"), ("compression.type", "brotli"), ("min.insync.replicas", "0"),
    ("min.cleanable.dirty.ratio", "1.5"), ("message.timestamp.type", "BrokerTime"), ("preallocate", "yes"),
    ("segment.bytes", "13"), ("max.message.bytes", "2147483648"), ("retention.ms", "-2"),
    ("leader.replication.throttled.replicas", "0-1"), ("delete.retention.ms", "soon"), ("no.such.config", "1"),
    ("kafscale.lfs.enabled", "yes"), ("kafscale.lfs.min_bytes", "-1"), ("kafscale.lfs.prefix", "/abs/"),
])
async def test_invalid_topic_configs_are_refused_as_kafka_refuses_them(nursery, name, value):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    code, message = await _create(client, "bad", {name: value})
    assert code == ErrorCode.invalid_config and name in message
    assert "bad" not in running.context.logs.topics()


async def test_min_compaction_lag_above_the_max_is_a_conflict(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    code, _ = await _create(client, "lag", {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert code == ErrorCode.invalid_config
    await _topic(client, "lag")
    assert await _alter(client, "lag", ("max.compaction.lag.ms", SET, "5")) == ErrorCode.none
    assert await _alter(client, "lag", ("min.compaction.lag.ms", SET, "10")) == ErrorCode.invalid_config


async def test_the_broker_default_cleanup_policy_applies_to_topics_that_set_none(nursery):
    running, _ = await start_gateway(nursery, log_cleanup_policy="compact")
    client = await Client.connect(running.port)
    await _topic(client, "c")
    assert (await _describe(client, "c"))["cleanup.policy"] == ("compact", STATIC_BROKER_CONFIG)
    assert running.context.logs.policy(running.context.logs.topics()["c"]).compact


@pytest.mark.parametrize("name, value", [
    ("compression.gzip.level", "0"), ("retention.ms", "1_000"), ("segment.bytes", "１０２４"),
    ("min.cleanable.dirty.ratio", "0_5"), ("message.format.version", "x" * 1000),
    ("message.format.version", "9.9"), ("remote.storage.enable", "true"), ("kafscale.lfs.bucket", "Bad_Bucket"),
    ("kafscale.lfs.prefix", "a/../.."),
])
async def test_values_kafka_refuses_are_refused_too(nursery, name, value):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    code, message = await _create(client, "bad", {name: value})
    assert code == ErrorCode.invalid_config and name in message
    await _topic(client, "t")
    assert await _alter(client, "t", (name, SET, value)) == ErrorCode.invalid_config
    assert running.context.logs.topics()["t"].configs == {}


@pytest.mark.parametrize("name, value", [
    ("compression.gzip.level", "-1"), ("compression.gzip.level", "9"), ("retention.ms", " +1000 "),
    ("message.format.version", "0.10.2-IV0"), ("message.format.version", "3.0-IV1"),
    ("min.cleanable.dirty.ratio", "5e-1"),
])
async def test_values_kafka_accepts_stay_accepted(nursery, name, value):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    assert await _create(client, "ok", {name: value}) == (ErrorCode.none, None)
