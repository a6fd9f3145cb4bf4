"""Admin-client operations with confluent-kafka's AdminClient (and kafka-python's for
log dirs): groups, topic configs, partitions, records, retention."""

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.support.gateway_process import GatewayProcess


@pytest.fixture
def admin_gateway(tmp_path):
    process = GatewayProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "0",
                             "--retention-check-interval-ms", "200").start()
    yield process
    process.kill()


def _produce(gateway, topic, count, partition=0, flush_every=10, timestamp=None):
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    for i in range(count):
        kwargs = {"timestamp": timestamp} if timestamp else {}
        producer.produce(topic, value=b"x" * 100, partition=partition, **kwargs)
        if i % flush_every == flush_every - 1:
            producer.flush(10)  # one log object per flush
    assert producer.flush(10) == 0


def test_list_describe_and_delete_groups(admin_gateway):
    gateway = admin_gateway
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("grp", num_partitions=2, replication_factor=1)])["grp"].result(10)
    _produce(gateway, "grp", 10)
    group = f"g-{uuid.uuid4()}"
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe(["grp"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not consumer.assignment():
        consumer.poll(0.2)
    consumer.commit(offsets=[TopicPartition("grp", 0, 5)], asynchronous=False)

    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(10)
    assert group in {g.group_id for g in stable.valid}
    description = admin.describe_consumer_groups([group])[group].result(10)
    assert description.state == ConsumerGroupState.STABLE and len(description.members) == 1
    assert sorted(tp.partition for tp in description.members[0].assignment.topic_partitions) == [0, 1]
    offsets = admin.list_consumer_group_offsets([_group_request(group)])[group].result(10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions if tp.partition == 0} == {(0, 5)}

    with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group])[group].result(10)
    consumer.close()
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def _group_request(group):
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


def test_topic_configs_describe_alter_incremental(admin_gateway):
    gateway = admin_gateway
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("cfg", num_partitions=1, replication_factor=1,
                                  config={"retention.ms": "3600000"})])["cfg"].result(10)
    resource = ConfigResource("topic", "cfg")
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete" and described["cleanup.policy"].is_default

    admin.incremental_alter_configs([ConfigResource("topic", "cfg", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])])[resource].result(10)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["max.message.bytes"].value == "2000" and described["retention.ms"].value == "3600000"

    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all", "message.max.bytes": 100_000})
    errors = []
    producer.produce("cfg", value=b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors[0] is not None and errors[0].name() == "MSG_SIZE_TOO_LARGE"  # the topic's limit applies

    # APPEND compact to delete, then SUBTRACT it back (what Connect's topic checks read).
    for operation, policy in ((AlterConfigOpType.APPEND, "delete,compact"), (AlterConfigOpType.SUBTRACT, "delete")):
        admin.incremental_alter_configs([ConfigResource("topic", "cfg", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=operation)])])[resource].result(10)
        described = admin.describe_configs([resource])[resource].result(10)
        assert described["cleanup.policy"].value == policy and not described["cleanup.policy"].is_default
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([ConfigResource("topic", "cfg", incremental_configs=[
            ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)])])[resource].result(10)
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([ConfigResource("topic", "cfg", incremental_configs=[
            ConfigEntry("colour", "blue", incremental_operation=AlterConfigOpType.SET)])])[resource].result(10)
    broker = ConfigResource("broker", "0")
    assert admin.describe_configs([broker])[broker].result(10)["message.max.bytes"].value == "1048588"


def test_create_partitions_and_delete_records(admin_gateway):
    gateway = admin_gateway
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("grow", num_partitions=2, replication_factor=1)])["grow"].result(10)
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(10)
    assert len(admin.list_topics(timeout=10).topics["grow"].partitions) == 5
    with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(10)
    _produce(gateway, "grow", 50, partition=4)

    result = admin.delete_records([TopicPartition("grow", 4, 23)])
    (future,) = result.values()
    assert future.result(10).low_watermark == 23
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "x", "enable.auto.commit": False})
    assert consumer.get_watermark_offsets(TopicPartition("grow", 4), timeout=10) == (23, 50)
    gateway.restart()  # the moved log start survives a restart
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "x", "enable.auto.commit": False})
    assert consumer.get_watermark_offsets(TopicPartition("grow", 4), timeout=10) == (23, 50)
    consumer.assign([TopicPartition("grow", 4, 23)])
    message = consumer.poll(10)
    assert message is not None and message.offset() == 23
    consumer.close()


def test_retention_by_size_and_time_deletes_old_segments(admin_gateway):
    gateway = admin_gateway
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("ret", num_partitions=1, replication_factor=1,
                                  config={"retention.bytes": "3000"})])["ret"].result(10)
    _produce(gateway, "ret", 100)  # ten flushes of ~1.3 KB
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "r", "enable.auto.commit": False})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)[0] < 70:
        time.sleep(0.1)
    low, high = consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)
    assert high == 100 and 70 <= low < 100

    admin.create_topics([NewTopic("old", num_partitions=1, replication_factor=1,
                                  config={"retention.ms": "60000"})])["old"].result(10)
    _produce(gateway, "old", 30, timestamp=int(time.time() * 1000) - 3_600_000)  # an hour old
    _produce(gateway, "old", 10)  # fresh
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and consumer.get_watermark_offsets(TopicPartition("old", 0), timeout=10)[0] < 30:
        time.sleep(0.1)
    assert consumer.get_watermark_offsets(TopicPartition("old", 0), timeout=10) == (30, 40)
    consumer.close()


def test_describe_log_dirs_and_cluster(admin_gateway):
    from kafka.admin import KafkaAdminClient

    gateway = admin_gateway
    _produce(gateway, "sized", 20)
    client = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        cluster = client.describe_cluster()
        assert cluster["cluster_id"] == "kafscale" and len(cluster["brokers"]) == 1
        (broker,) = client.describe_log_dirs(["sized"])
        (log_dir,) = broker["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["log_dir"].startswith("file://")
        (topic,) = log_dir["topics"]
        (partition,) = topic["partitions"]
        # Stored batch bytes: still in shared log objects (compaction waits compaction_delay_ms).
        from kafscale.spark_connector.planning import read_catalog
        from kafscale.spark_connector.stored_log import LogEntries
        from kafscale.storage_backends import LocalBackend

        store = LocalBackend(gateway.data_dir)
        stored = sum(e.length for e in LogEntries(store, "kafscale").of(read_catalog(store, "kafscale")["sized"], 0))
        assert stored > 20 * 10
        assert (topic["name"], partition["partition_index"], partition["partition_size"]) == ("sized", 0, stored)
    finally:
        client.close()


def test_elections_and_reassignments_as_a_single_replica_cluster(admin_gateway):
    """kafka-python's admin calls get Kafka's answers (no election needed, no reassignment in
    progress, one log dir) instead of a closed connection."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError, LogDirNotFoundError, NoError
    from kafka.structs import TopicPartitionReplica

    gateway = admin_gateway
    _produce(gateway, "moves", 1)
    client = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        answer = client.elect_leaders(0, {"moves": [0]}, raise_errors=False)
        (result,) = answer.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 84)]  # ELECTION_NOT_NEEDED
        assert client.list_partition_reassignments() == {}
        partition = TopicPartition("moves", 0)
        assert client.alter_partition_reassignments({partition: [0]}) == {partition: None}
        refused = client.alter_partition_reassignments({partition: [0, 1, 2]})
        assert refused[partition] is InvalidReplicationAssignmentError
        (broker,) = client.describe_log_dirs(["moves"])
        here = broker["log_dirs"][0]["log_dir"]
        replica = TopicPartitionReplica("moves", 0, 0)
        assert client.alter_replica_log_dirs({replica: here}) == {replica: NoError}
        assert client.alter_replica_log_dirs({replica: "/elsewhere"}) == {replica: LogDirNotFoundError}
    finally:
        client.close()


def test_broker_configs_tools_read(admin_gateway):
    """kafka-python's admin reads the broker resource (advertised.listeners among others)."""
    from kafka.admin import ConfigResource as PyConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=admin_gateway.bootstrap)
    try:
        answer = client.describe_configs([PyConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        configs = answer["broker"]["0"]
        assert configs["advertised.listeners"]["value"] == f"PLAINTEXT://127.0.0.1:{admin_gateway.port}"
        assert configs["advertised.listeners"]["config_source"] == "DEFAULT_CONFIG"
        # Issue 20 item 15: as Kafka 3.9 reports them, dynamic per-broker configs are not read-only.
        assert configs["advertised.listeners"]["read_only"] is False
        assert configs["broker.id"]["read_only"] is True
        assert configs["listeners"]["config_source"] == "STATIC_BROKER_CONFIG"  # --port given
        assert (configs["log.segment.bytes"]["value"], configs["log.segment.bytes"]["config_source"]) == \
            (str(64 * 2**20), "DEFAULT_CONFIG")
        assert configs["default.replication.factor"]["value"] == "1"
        assert configs["log.dirs"]["value"].startswith("file://")
        assert configs["log.retention.check.interval.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
    finally:
        client.close()
