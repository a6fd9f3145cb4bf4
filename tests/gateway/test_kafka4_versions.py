"""Kafka 4's group APIs on the wire, through the real handlers (tests/support/direct.py) and
kio's codecs: ConsumerGroupHeartbeat v1 (client-made member ids), OffsetCommit and
OffsetFetch v10 (topics by id) with member epochs, ConsumerGroupDescribe v1, ListGroups v5's
type filter, DescribeGroups v6 on a consumer-protocol group."""

import uuid

from kafscale.protocol import ErrorCode
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from tests.support.direct import direct_gateway


def _request(api_key: int, version: int, **values):
    return build(request_class(api_key, version), values)


async def _topic_id(gateway, name: str, partitions: int) -> uuid.UUID:
    created = await gateway.call(19, 7, _request(19, 7, topics=[dict(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none
    return created.topics[0].topic_id


async def _fetch_v18(gateway, topic_id: uuid.UUID, partition: int, min_bytes: int):
    """Fetch v18 of one partition from offset 0, by topic id, without waiting."""
    return await gateway.call(1, 18, _request(
        1, 18, replica_id=-1, max_wait=0, min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[dict(topic_id=topic_id, partitions=[dict(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))


def _beat(member_id: str, epoch: int, **values):
    return _request(68, 1, **{"group_id": "g", "member_id": member_id, "member_epoch": epoch, "instance_id": None,
                              "rack_id": None, "rebalance_timeout": 30_000, "subscribed_topic_names": None,
                              "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None,
                              **values})


async def test_a_member_joins_commits_by_topic_id_and_is_described():
    async with direct_gateway() as gateway:
        topic_id = await _topic_id(gateway, "orders", 3)
        joined = await gateway.call(68, 1, _beat("m-1", 0, subscribed_topic_names=["orders"]))
        assert joined.error_code == ErrorCode.none and joined.member_id == "m-1" and joined.member_epoch > 0
        (owned,) = joined.assignment.topic_partitions
        assert owned.topic_id == topic_id and sorted(owned.partitions) == [0, 1, 2]
        epoch = joined.member_epoch

        def commit(member_epoch: int, topic: uuid.UUID = topic_id):
            return _request(8, 10, group_id="g", generation_id_or_member_epoch=member_epoch, member_id="m-1",
                            group_instance_id=None, topics=[dict(topic_id=topic, partitions=[dict(
                                partition_index=1, committed_offset=42, committed_leader_epoch=-1,
                                committed_metadata=None)])])

        committed = await gateway.call(8, 10, commit(epoch))
        assert committed.topics[0].topic_id == topic_id
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        stale = await gateway.call(8, 10, commit(epoch + 7))
        assert stale.topics[0].partitions[0].error_code == ErrorCode.stale_member_epoch
        unknown = await gateway.call(8, 10, commit(epoch, uuid.uuid4()))
        assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_id

        def fetch(member_epoch: int):
            return _request(9, 10, groups=[dict(group_id="g", member_id="m-1", member_epoch=member_epoch,
                                                topics=[dict(topic_id=topic_id, partition_indexes=[0, 1])])],
                            require_stable=False)

        fetched = await gateway.call(9, 10, fetch(epoch))
        (group,) = fetched.groups
        assert group.error_code == ErrorCode.none and group.topics[0].topic_id == topic_id
        assert [p.committed_offset for p in group.topics[0].partitions] == [-1, 42]
        assert (await gateway.call(9, 10, fetch(epoch + 1))).groups[0].error_code == ErrorCode.stale_member_epoch

        described = await gateway.call(69, 1, _request(69, 1, group_ids=["g", "nobody"],
                                                        include_authorized_operations=False))
        mine, missing = described.groups
        assert (mine.error_code, mine.group_state, mine.assignor_name) == (ErrorCode.none, "Stable", "uniform")
        assert mine.members[0].member_epoch == epoch and mine.members[0].subscribed_topic_names == ("orders",)
        assert mine.members[0].assignment.topic_partitions[0].topic_name == "orders"
        assert mine.members[0].member_type == 1  # KIP-1099: a consumer-protocol member
        assert missing.error_code == ErrorCode.group_id_not_found

        listed = await gateway.call(16, 5, _request(16, 5, states_filter=[], types_filter=["consumer"]))
        assert [(g.group_id, g.group_type) for g in listed.groups] == [("g", "consumer")]
        assert (await gateway.call(16, 5, _request(16, 5, states_filter=[], types_filter=["classic"]))).groups == ()
        classic_view = await gateway.call(15, 6, _request(15, 6, groups=["g"], include_authorized_operations=False))
        assert classic_view.groups[0].error_code == ErrorCode.group_id_not_found
        assert "not a classic group" in classic_view.groups[0].error_message

        left = await gateway.call(68, 1, _beat("m-1", -1))
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)


async def test_a_classic_member_joins_a_consumer_group_over_the_wire_and_is_described_as_classic():
    """Online migration on the wire: JoinGroup v9 into a consumer-protocol group is answered at
    once (no leader, its epoch as generation), SyncGroup gives it its partitions, and
    ConsumerGroupDescribe lists it as a classic member (type 0)."""
    from kafscale.protocol.consumer_protocol import decode_assignment

    subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x06orders" + b"\xff\xff\xff\xff"  # v0: orders
    async with direct_gateway() as gateway:
        await _topic_id(gateway, "orders", 4)
        joined = await gateway.call(68, 1, _beat("m-1", 0, subscribed_topic_names=["orders"]))
        assert joined.error_code == ErrorCode.none
        join = await gateway.call(11, 9, _request(11, 9, group_id="g", session_timeout=10_000,
                                                  rebalance_timeout=10_000, member_id="", group_instance_id=None,
                                                  protocol_type="consumer", reason=None,
                                                  protocols=[dict(name="range", metadata=subscription)]))
        assert join.error_code == ErrorCode.member_id_required
        join = await gateway.call(11, 9, _request(11, 9, group_id="g", session_timeout=10_000,
                                                  rebalance_timeout=10_000, member_id=join.member_id,
                                                  group_instance_id=None, protocol_type="consumer", reason=None,
                                                  protocols=[dict(name="range", metadata=subscription)]))
        assert (join.error_code, join.leader, join.protocol_name, join.members) == (ErrorCode.none, "", "range", ())
        synced = await gateway.call(14, 5, _request(14, 5, group_id="g", generation_id=join.generation_id,
                                                    member_id=join.member_id, group_instance_id=None,
                                                    protocol_type="consumer", protocol_name="range", assignments=[]))
        assert synced.error_code == ErrorCode.none
        classic_holds = decode_assignment(synced.assignment).get("orders", frozenset())
        described = await gateway.call(69, 1, _request(69, 1, group_ids=["g"], include_authorized_operations=False))
        types = {m.member_id: m.member_type for m in described.groups[0].members}
        assert types == {"m-1": 1, join.member_id: 0}
        # The classic member has what the consumer member gave up (none of it twice).
        mine = await gateway.call(68, 1, _beat("m-1", joined.member_epoch, topic_partitions=[]))
        consumer_holds = {p for t in (mine.assignment.topic_partitions if mine.assignment else ()) for p in t.partitions}
        assert not classic_holds & consumer_holds


async def test_heartbeat_refusals_carry_kafkas_codes():
    async with direct_gateway() as gateway:
        await _topic_id(gateway, "t", 1)
        no_id = await gateway.call(68, 1, _beat("", 0, subscribed_topic_names=["t"]))
        assert no_id.error_code == ErrorCode.invalid_request
        never = await gateway.call(68, 1, _beat("ghost", 3))
        assert never.error_code == ErrorCode.unknown_member_id
        bad_regex = await gateway.call(68, 1, _beat("m", 0, subscribed_topic_regex="(unclosed"))
        assert bad_regex.error_code == ErrorCode.invalid_regular_expression
        assignor = await gateway.call(68, 1, _beat("m", 0, subscribed_topic_names=["t"], server_assignor="magic"))
        assert assignor.error_code == ErrorCode.unsupported_assignor
        joined = await gateway.call(68, 1, _beat("m", 0, subscribed_topic_names=["t"]))
        fenced = await gateway.call(68, 1, _beat("m", joined.member_epoch + 1))
        assert fenced.error_code == ErrorCode.fenced_member_epoch


async def test_kafka_4_versions_of_metadata_list_offsets_fetch_and_list_transactions():
    async with direct_gateway() as gateway:
        topic_id = await _topic_id(gateway, "four", 1)
        metadata = await gateway.call(3, 13, _request(3, 13, topics=[dict(topic_id=None, name="four")],
                                                      allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False))
        assert metadata.error_code == ErrorCode.none and metadata.topics[0].topic_id == topic_id
        offsets = await gateway.call(2, 10, _request(2, 10, replica_id=-1, isolation_level=0, timeout=5000, topics=[
            dict(name="four", partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        assert offsets.topics[0].partitions[0].offset == 0
        fetched = await _fetch_v18(gateway, topic_id, 0, min_bytes=1)
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.none
        for ids in (["orders-1", "orders-2", "audit-1"],):
            for transactional_id in ids:
                answer = await gateway.call(22, 5, _request(22, 5, transactional_id=transactional_id,
                                                            transaction_timeout=60_000, producer_id=-1,
                                                            producer_epoch=-1))
                assert answer.error_code == ErrorCode.none

        def listing(pattern):
            return _request(66, 2, state_filters=[], producer_id_filters=[], duration_filter=-1,
                            transactional_id_pattern=pattern)

        listed = await gateway.call(66, 2, listing("orders-.*"))
        assert sorted(t.transactional_id for t in listed.transaction_states) == ["orders-1", "orders-2"]
        assert len((await gateway.call(66, 2, listing(None))).transaction_states) == 3
        assert (await gateway.call(66, 2, listing("(a)\\1"))).error_code == ErrorCode.invalid_regular_expression


async def test_describe_topic_partitions_pages_with_its_cursor():
    async with direct_gateway() as gateway:
        await _topic_id(gateway, "alpha", 3)
        await _topic_id(gateway, "beta", 4)

        def describe(names, limit, cursor=None):
            return _request(75, 0, topics=[dict(name=n) for n in names], response_partition_limit=limit,
                            cursor=cursor)

        pages, cursor = [], None
        while True:
            answer = await gateway.call(75, 0, describe([], 2, cursor))
            pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics])
            if answer.next_cursor is None:
                break
            cursor = dict(topic_name=answer.next_cursor.topic_name, partition_index=answer.next_cursor.partition_index)
        assert pages == [[("alpha", [0, 1])], [("alpha", [2]), ("beta", [0])], [("beta", [1, 2])], [("beta", [3])]]
        named = await gateway.call(75, 0, describe(["beta", "nope"], 100))
        assert [(t.name, t.error_code, len(t.partitions)) for t in named.topics] == [
            ("beta", ErrorCode.none, 4), ("nope", ErrorCode.unknown_topic_or_partition, 0)]
        assert named.topics[0].partitions[0].leader_id == 0
        lost = await gateway.call(75, 0, describe(["alpha"], 10, dict(topic_name="zeta", partition_index=0)))
        assert lost.topics[0].error_code == ErrorCode.invalid_request


def _alter_group(group: str, *operations: tuple[str, int, str | None]):
    return _request(44, 1, resources=[dict(resource_type=32, resource_name=group, configs=[
        dict(name=name, config_operation=operation, value=value) for name, operation, value in operations])],
        validate_only=False)


async def _group_configs(gateway, group: str) -> dict[str, tuple[str, int]]:
    body = await gateway.call(32, 4, _request(32, 4, resources=[dict(resource_type=32, resource_name=group,
                                                                       configuration_keys=None)],
                                              include_synonyms=False, include_documentation=True))
    (result,) = body.results
    assert result.error_code == ErrorCode.none
    return {c.name: (c.value, c.config_source) for c in result.configs}


async def test_group_configs_are_set_described_and_followed_by_the_next_heartbeat():
    """KIP-848's group configs on the GROUP resource (32): set before the group exists,
    answered by its members' next heartbeat, described with their source, refused by name
    and by value, deleted back to the gateway's default."""
    SET, DELETE = 0, 1
    async with direct_gateway() as gateway:
        await _topic_id(gateway, "t", 1)
        defaults = await _group_configs(gateway, "g")
        assert defaults == {"consumer.heartbeat.interval.ms": ("5000", 5), "consumer.session.timeout.ms": ("45000", 5),
                            "share.session.timeout.ms": ("45000", 5), "share.heartbeat.interval.ms": ("5000", 5),
                            "share.record.lock.duration.ms": ("30000", 5), "share.delivery.count.limit": ("5", 5),
                            "share.auto.offset.reset": ("latest", 5), "share.isolation.level": ("read_uncommitted", 5)}
        altered = await gateway.call(44, 1, _alter_group("g", ("consumer.heartbeat.interval.ms", SET, "1500")))
        assert altered.responses[0].error_code == ErrorCode.none
        assert (await _group_configs(gateway, "g"))["consumer.heartbeat.interval.ms"] == ("1500", 8)
        joined = await gateway.call(68, 1, _beat("m", 0, subscribed_topic_names=["t"]))
        assert joined.heartbeat_interval.total_seconds() == 1.5
        assert (await gateway.call(68, 1, _beat("x", 0, group_id="other", subscribed_topic_names=["t"]))
                ).heartbeat_interval.total_seconds() == 5  # other groups keep the default
        refusals = [
            _alter_group("g", ("consumer.rebalance.magic", SET, "1")),
            _alter_group("g", ("consumer.session.timeout.ms", SET, "-5")),
            _alter_group("g", ("consumer.session.timeout.ms", SET, "1000")),  # not above the heartbeat interval
            _alter_group("g", ("consumer.session.timeout.ms", 2, "1")),  # APPEND: not a list
        ]
        for request in refusals:
            assert (await gateway.call(44, 1, request)).responses[0].error_code == ErrorCode.invalid_config
        again = await gateway.call(44, 1, _alter_group("g", ("consumer.heartbeat.interval.ms", DELETE, None)))
        assert again.responses[0].error_code == ErrorCode.none
        assert (await _group_configs(gateway, "g"))["consumer.heartbeat.interval.ms"] == ("5000", 5)
        assert (await gateway.call(68, 1, _beat("m", joined.member_epoch))).heartbeat_interval.total_seconds() == 5


# Apache Kafka 4.3's broker: the highest version of each API it serves (kafka-clients 4.3.0's
# ApiKeys, latestVersion() of every key in the BROKER listener's scope).
KAFKA_4_3_MAX = {
    0: 13, 1: 18, 2: 11, 3: 13, 8: 10, 9: 10, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 6, 16: 5, 17: 1, 18: 4,
    19: 7, 20: 6, 21: 2, 22: 6, 23: 4, 24: 5, 25: 4, 26: 5, 27: 2, 28: 5, 29: 3, 30: 3, 31: 3, 32: 4, 33: 2,
    34: 2, 35: 5, 36: 2, 37: 3, 38: 3, 39: 2, 40: 2, 41: 3, 42: 2, 43: 2, 44: 1, 45: 1, 46: 0, 47: 0, 48: 1,
    49: 1, 50: 0, 51: 0, 55: 2, 57: 2, 60: 2, 61: 0, 64: 0, 65: 0, 66: 2, 68: 1, 69: 1, 71: 0, 72: 0, 74: 1,
    75: 0, 76: 1, 77: 1, 78: 2, 79: 2, 80: 1, 81: 0, 83: 0, 84: 0, 85: 1, 86: 0, 87: 1, 88: 0, 89: 0, 90: 1,
    91: 0, 92: 0,
}
# The APIs we serve below Kafka 4.3's newest version, and why (docs/compatibility.md).
BEHIND_4_3 = {
    22: "InitProducerId v6 is two-phase commit (KIP-939)",
    24: "AddPartitionsToTxn v5 is broker-to-broker verification",
    45: "AlterPartitionReassignments v1: partition reassignment is not served",
}


async def test_a_version_guessing_client_sees_kafka_4_3_in_every_api_we_serve():
    """franz-go-style version guessing compares each API's newest version with a release's:
    every API we serve answers Kafka 4.3's, except those listed with their reason, which
    must really be behind (the list cannot go stale)."""
    async with direct_gateway() as gateway:
        answer = await gateway.call(18, 3, _request(18, 3, client_software_name="guess",
                                                    client_software_version="1"))
    served = {key.api_key: (key.min_version, key.max_version) for key in answer.api_keys}
    assert set(served) <= set(KAFKA_4_3_MAX)  # nothing Kafka 4.3 does not have
    at_4_3 = {key for key, (_, high) in served.items() if high == KAFKA_4_3_MAX[key]}
    assert set(served) - at_4_3 == set(BEHIND_4_3)
    for key in BEHIND_4_3:
        assert served[key][1] < KAFKA_4_3_MAX[key]
    # Feature levels a Kafka 4 client reads to pick its protocols.
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    assert finalized == {"group.version": 1, "transaction.version": 2, "share.version": 1}
    assert answer.finalized_features_epoch > 0
    assert {f.name for f in answer.supported_features} == set(finalized)


async def test_produce_v13_names_topics_by_id_and_answers_by_id():
    from kafscale.protocol.records import build_batch

    async with direct_gateway() as gateway:
        topic_id = await _topic_id(gateway, "by-id", 2)
        stranger = uuid.uuid4()
        body = await gateway.call(0, 13, _request(0, 13, transactional_id=None, acks=-1, timeout=5000, topic_data=[
            dict(topic_id=topic_id, partition_data=[dict(index=1, records=build_batch([(None, b"v")]))]),
            dict(topic_id=stranger, partition_data=[dict(index=0, records=build_batch([(None, b"w")]))])]))
        answered = {topic.topic_id: [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses]
                    for topic in body.responses}
        assert answered == {topic_id: [(1, ErrorCode.none, 0)], stranger: [(0, ErrorCode.unknown_topic_id, -1)]}
        fetched = await _fetch_v18(gateway, topic_id, 1, min_bytes=0)
        assert fetched.responses[0].partitions[0].high_watermark == 1
