"""The Java client, kafka-clients 4.3.0 (the reference client), against a gateway on the
filesystem and on S3: admin (topics by name and by id, configs, partitions, deletion,
static members removed by instance id), idempotent and transactional producers under each
codec, and a classic consumer group reading committed records only."""

import pytest

from tests.support import java_client

pytestmark = pytest.mark.skipif(
    not java_client.installed() and not __import__("os").environ.get("CI"),
    reason="the Java client is not installed (scripts/test.sh installs it; in CI its absence fails)",
)


def test_admin_topics_by_name_and_id_configs_partitions_and_deletion(gateway):
    out = java_client.run("admin", gateway.bootstrap, "java-admin")
    assert out["cluster_nodes"] == "1"
    assert out["listed"] == out["listed_internal"] == "[java-admin]"  # no internal topic made up
    assert (out["partitions"], out["by_id_name"]) == ("3", "java-admin")  # describeTopics by id (empty name)
    assert (out["retention_ms"], out["cleanup_policy"]) == ("3600000", "compact")
    assert (out["partitions_after"], out["deleted"]) == ("4", "true")


def test_producers_and_a_read_committed_static_member(gateway):
    assert java_client.run("produce", gateway.bootstrap, "jt", "50", "idempotent", "lz4")["last_offset"] == "49"
    java_client.run("produce", gateway.bootstrap, "jt", "10", "transactional-abort", "zstd")
    java_client.run("produce", gateway.bootstrap, "jt", "20", "transactional-commit", "snappy")
    read = java_client.run("consume", gateway.bootstrap, "jt", "jg", "70", "read_committed", "member-1")
    assert (read["count"], read["aborted_seen"], read["first"]) == ("70", "0", "idempotent-0")
    assert gateway.metric("kafscale_incremental_fetches_total") > 0  # the Java consumer fetched in a session
    # removeMembersFromConsumerGroup by group.instance.id (Kafka Streams and operators' tools):
    # Kafka answers with the request's empty member id; answering the resolved one failed it.
    removed = java_client.run("remove-static", gateway.bootstrap, "jg", "member-1")
    assert removed["members_left"] == "0" and int(removed["committed_total"]) >= 80


def test_a_consumer_protocol_member_and_its_description(gateway):
    """KIP-848 with the reference client: group.protocol=consumer reads everything, commits, and
    the admin describes the group through ConsumerGroupDescribe and sets and describes its
    group configs."""
    java_client.run("produce", gateway.bootstrap, "j848", "30", "idempotent", "none")
    out = java_client.run("consumer-protocol", gateway.bootstrap, "j848", "j848-group", "30")
    assert (out["count"], out["committed_total"]) == ("30", "30")
    assert (out["group_type"], out["state"], out["members"]) == ("Consumer", "Stable", "1")
    assert out["member_partitions"] == out["assigned"] != "0"
    # KIP-848's group configs through the Java admin (the GROUP config resource).
    assert out["group_heartbeat_interval"] == "1000/DYNAMIC_GROUP_CONFIG"


@pytest.mark.parametrize("version", [2, 1])
def test_transactions_of_either_protocol_version_commit_abort_and_carry_offsets(tmp_path, version):
    """The Java client 4.3 picks its transaction protocol from ApiVersions' finalized
    transaction.version: at 2 (the default) it adds partitions through Produce v12 and offsets
    through TxnOffsetCommit v5, and each EndTxn bumps the producer epoch, as DescribeProducers
    shows after every transaction; at 1 the epoch stays and AddPartitionsToTxn is used."""
    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "data", "--transaction-version", str(version)).start()
    try:
        out = java_client.run("transactions", gateway.bootstrap, f"jtx{version}", "jtx-group", "6")
    finally:
        gateway.kill()
    epochs = [int(e) for e in out["epochs"].strip("[]").split(",")]
    if version == 2:
        assert epochs == list(range(epochs[0], epochs[0] + 6)) and epochs[0] >= 1  # one bump per transaction
    else:
        assert epochs == [0] * 6
    assert (out["read"], out["aborted_seen"], out["group_offset"]) == ("20", "0", "5")  # 4 committed of 5 records


def test_consumer_protocol_members_share_leave_come_back_and_follow_a_regex(tmp_path):
    """The reference client with group.protocol=consumer through the group scenarios: 3 members
    on 6 partitions (2 each, every record once), a member leaving (the others take its
    partitions), a static member back to the very partitions it had, and a server-side regex
    (SubscriptionPattern, RE2) reading a topic created after it subscribed."""
    from tests.support.gateway_process import GatewayProcess

    gateway = GatewayProcess(tmp_path / "data", "--group-consumer-heartbeat-interval-ms", "500").start()
    try:
        out = java_client.run("consumer-matrix", gateway.bootstrap, "jmatrix", "jmatrix-group", timeout=240)
    finally:
        gateway.kill()
    assert (out["three_read"], out["three_split"]) == ("600/600", "[2, 2, 2]")
    assert out["after_leave"] == "[3, 3]"
    assert (out["static_back_same"], out["regex_read"]) == ("true", "10")


def test_a_share_consumer_accepts_releases_and_the_admin_manages_its_share_group(gateway):
    """Share groups (KIP-932) with the reference client's KafkaShareConsumer: every record
    accepted once, one released every time archived after the group's delivery limit (3), and
    the admin's describeShareGroups, listShareGroupOffsets, alterShareGroupOffsets and
    deleteShareGroups."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for value in [f"job-{i}" for i in range(15)] + ["poison"] + [f"job-{i}" for i in range(15, 30)]:
        producer.produce("jshare", value=value.encode(), partition=0)
    assert producer.flush(30) == 0
    out = java_client.run("share", gateway.bootstrap, "jshare", "jshare-group", "30")
    assert (out["accepted"], out["poison_deliveries"], out["most_deliveries_of_others"]) == ("30", "3", "1")
    assert (out["share_state"], out["share_members"]) == ("Stable", "1")
    assert (out["start_offset"], out["start_offset_altered"], out["deleted"]) == ("31", "1", "jshare-group")
