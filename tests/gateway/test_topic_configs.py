"""Topic configs: defaults derived from the broker config, and IncrementalAlterConfigs on lists."""

import pytest

from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.wire_client import Client, start_gateway

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
    # Appending what is there already changes nothing; compaction is refused as unsupported.
    assert await _alter(client, "l", ("cleanup.policy", APPEND, "delete")) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("delete", TOPIC_CONFIG)
    assert await _alter(client, "l", ("cleanup.policy", APPEND, "compact")) == ErrorCode.invalid_config
    assert await _alter(client, "l", ("cleanup.policy", SUBTRACT, "delete")) == ErrorCode.invalid_config
    assert await _alter(client, "l", ("cleanup.policy", SUBTRACT, "compact")) == ErrorCode.none
    assert await _alter(client, "l", ("retention.ms", APPEND, "5")) == ErrorCode.invalid_config  # not a list
    assert await _alter(client, "l", ("cleanup.policy", DELETE, None)) == ErrorCode.none
    assert (await _describe(client, "l"))["cleanup.policy"] == ("delete", DEFAULT_CONFIG)
