"""Metadata as the Java admin and lag tools ask it: by topic id with an empty name, and for
Kafka's internal topics, which clients never create."""

import uuid

import pytest

from devkit.wire_client import Client, create_topic, start_gateway
from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class


def _metadata(topics, allow_auto_topic_creation=True):
    return build(request_class(3, 12), dict(topics=topics, allow_auto_topic_creation=allow_auto_topic_creation,
                                             include_topic_authorized_operations=False))


async def test_a_topic_id_with_an_empty_name_is_looked_up_by_id(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "by-id")
    topic_id = running.context.logs.topics()["by-id"].topic_id
    # describeTopics(TopicCollection.ofTopicIds(...)) in kafka-clients 4.x sends name "".
    body = await client.call(3, 12, _metadata([dict(topic_id=topic_id, name="")]))
    (topic,) = body.topics
    assert (topic.error_code, topic.name, topic.topic_id) == (ErrorCode.none, "by-id", topic_id)
    assert len(topic.partitions) == 1
    body = await client.call(3, 12, _metadata([dict(topic_id=uuid.uuid4(), name="")]))
    assert body.topics[0].error_code == ErrorCode.unknown_topic_id
    assert "" not in running.context.logs.topics()


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state", "__share_group_state"])
async def test_internal_topics_are_never_created_by_clients(nursery, name):
    running, _ = await start_gateway(nursery, auto_create_topics=True)
    client = await Client.connect(running.port)
    body = await client.call(3, 12, _metadata([dict(topic_id=uuid.UUID(int=0), name=name)]))
    assert body.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    created = await client.call(19, 5, build(request_class(19, 5), dict(
        topics=[dict(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout=5000, validate_only=True)))
    assert created.topics[0].error_code == ErrorCode.invalid_request and "internal" in created.topics[0].error_message
    assert name not in running.context.logs.topics()
