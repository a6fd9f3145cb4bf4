"""The transaction APIs over the wire, at the edges a client (or an attacker) reaches: a
produce to a partition not in the transaction (KIP-890), stale epochs, foreign producer ids,
forged markers, verify-only batches, unstable offsets, and what the admin APIs describe."""

import pytest
import trio

from devkit.wire_client import Client, create_topic, start_gateway
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from kafscale.protocol.records import iter_records, split_batches


async def _call(client, key, version, values):
    return await client.call(key, version, build(request_class(key, version), values))


async def _init(client, transactional_id, timeout_ms=60_000, version=4):
    body = await _call(client, 22, version, dict(transactional_id=transactional_id, transaction_timeout=timeout_ms,
                                                 producer_id=-1, producer_epoch=-1))
    assert body.error_code == ErrorCode.none
    return body.producer_id, body.producer_epoch


async def _add(client, transactional_id, producer, partitions, version=3):
    pid, epoch = producer
    body = await _call(client, 24, version, dict(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[dict(name=t, partitions=ps)
                                                                for t, ps in partitions.items()]))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in body.results_by_topic_v3_and_below for p in t.results_by_partition}


async def _end(client, transactional_id, producer, commit, version=3):
    pid, epoch = producer
    return (await _call(client, 26, version, dict(transactional_id=transactional_id, producer_id=pid,
                                                  producer_epoch=epoch, committed=commit))).error_code


async def _produce(client, topic, batch, transactional_id, partition=0):
    body = await _call(client, 0, 9, dict(transactional_id=transactional_id, acks=-1, timeout=5000, topic_data=[
        dict(name=topic, partition_data=[dict(index=partition, records=batch)])]))
    return body.responses[0].partition_responses[0]


def _txn_batch(producer, values, sequence=0):
    pid, epoch = producer
    return build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                       transactional=True)


async def _fetch(client, topic, isolation, offset=0):
    body = await _call(client, 1, 12, dict(
        replica_id=-1, max_wait=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation, session_id=0,
        session_epoch=-1, topics=[dict(topic=topic, partitions=[dict(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
    return body.responses[0].partitions[0]


async def test_a_produce_to_a_partition_not_in_the_transaction_is_refused(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    answer = await _produce(client, "t", _txn_batch(producer, [b"early"]), "app")
    assert answer.error_code == ErrorCode.invalid_txn_state  # not added yet: nothing stored
    assert await _add(client, "app", producer, {"t": [0]}) == {("t", 0): ErrorCode.none}
    assert (await _produce(client, "t", _txn_batch(producer, [b"in"]), "app")).error_code == ErrorCode.none
    other = await _init(client, "other")
    assert await _add(client, "other", other, {"t": [0]}) == {("t", 0): ErrorCode.none}
    # another id's producer id in this transactional id's request
    assert (await _produce(client, "t", _txn_batch(other, [b"x"]), "app")).error_code == \
        ErrorCode.invalid_producer_id_mapping
    assert await _end(client, "app", producer, commit=True) == ErrorCode.none
    data = bytes((await _fetch(client, "t", 1)).records or b"")
    values = [r.value for h in split_batches(data) if not h.is_control
              for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))]
    assert values == [b"in"]


async def test_a_late_batch_after_the_marker_is_refused_and_the_transaction_stays_closed(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    assert (await _produce(client, "t", _txn_batch(producer, [b"a"]), "app")).error_code == ErrorCode.none
    assert await _end(client, "app", producer, commit=False) == ErrorCode.none
    late = await _produce(client, "t", _txn_batch(producer, [b"late"], 1), "app")
    assert late.error_code == ErrorCode.invalid_txn_state
    answer = await _fetch(client, "t", 1)
    assert answer.last_stable_offset == answer.high_watermark == 2  # the data and its marker, nothing open


async def test_epochs_fence_and_errors_follow_the_request_version(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    first = await _init(client, "app")
    second = await _init(client, "app")
    assert second == (first[0], first[1] + 1)
    assert (await _add(client, "app", first, {"t": [0]}, version=3))[("t", 0)] == ErrorCode.producer_fenced
    assert (await _add(client, "app", first, {"t": [0]}, version=1))[("t", 0)] == ErrorCode.invalid_producer_epoch
    assert await _end(client, "app", first, commit=True, version=1) == ErrorCode.invalid_producer_epoch
    assert await _end(client, "app", second, commit=True) == ErrorCode.invalid_txn_state  # nothing ongoing
    assert await _end(client, "nobody", second, commit=True) == ErrorCode.invalid_producer_id_mapping
    body = await _call(client, 22, 4, dict(transactional_id="app", transaction_timeout=900_001, producer_id=-1,
                                           producer_epoch=-1))
    assert body.error_code == ErrorCode.invalid_transaction_timeout


async def test_unknown_partitions_fail_the_whole_add_and_the_rest_is_not_attempted(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    answer = await _add(client, "app", producer, {"t": [0, 7], "missing": [0]})
    assert answer == {("t", 0): ErrorCode.operation_not_attempted, ("t", 7): ErrorCode.unknown_topic_or_partition,
                      ("missing", 0): ErrorCode.unknown_topic_or_partition}


async def test_verify_only_batches_say_whether_partitions_are_in_the_transaction(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    body = await _call(client, 24, 4, dict(transactions=[dict(
        transactional_id="app", producer_id=producer[0], producer_epoch=producer[1], verify_only=True,
        topics=[dict(name="t", partitions=[0])])]))
    assert body.error_code == ErrorCode.none
    [result] = body.results_by_transaction
    assert result.topic_results[0].results_by_partition[0].partition_error_code == ErrorCode.none
    body = await _call(client, 24, 4, dict(transactions=[dict(
        transactional_id="app", producer_id=producer[0], producer_epoch=producer[1] + 1, verify_only=True,
        topics=[dict(name="t", partitions=[0])])]))
    code = body.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code
    assert code == ErrorCode.invalid_txn_state


async def test_a_client_cannot_forge_markers_or_transactional_batches(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    control = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], producer_id=producer[0],
                          producer_epoch=producer[1], transactional=True, control=True)
    assert (await _produce(client, "t", control, "app")).error_code == ErrorCode.invalid_record
    plain = build_batch([(None, b"not transactional")])
    assert (await _produce(client, "t", plain, "app")).error_code == ErrorCode.invalid_record
    assert (await _produce(client, "t", _txn_batch(producer, [b"x"]), None)).error_code == \
        ErrorCode.transactional_id_authorization_failed


async def test_offsets_committed_in_a_transaction_are_unstable_until_it_commits(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "in")
    producer = await _init(client, "app")
    assert (await _call(client, 25, 3, dict(transactional_id="app", producer_id=producer[0],
                                            producer_epoch=producer[1], group_id="g"))).error_code == 0
    body = await _call(client, 28, 3, dict(transactional_id="app", group_id="g", producer_id=producer[0],
                                           producer_epoch=producer[1], generation_id=-1, member_id="",
                                           group_instance_id=None, topics=[dict(name="in", partitions=[dict(
                                               partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                               committed_metadata="m")])]))
    assert body.topics[0].partitions[0].error_code == ErrorCode.none

    async def offset_fetch(require_stable):
        body = await _call(client, 9, 7, dict(group_id="g", topics=[dict(name="in", partition_indexes=[0])],
                                              require_stable=require_stable))
        part = body.topics[0].partitions[0]
        return part.error_code, part.committed_offset

    assert await offset_fetch(True) == (ErrorCode.unstable_offset_commit, -1)
    assert await offset_fetch(False) == (ErrorCode.none, -1)  # not visible before the commit
    assert await _end(client, "app", producer, commit=True) == ErrorCode.none
    assert await offset_fetch(True) == (ErrorCode.none, 42)


async def test_transactions_v2_add_partitions_and_groups_implicitly_and_bump_the_epoch_per_transaction(nursery):
    """KIP-890 part 2 as the Java client 4.x speaks it: Produce v12 and TxnOffsetCommit v5
    add their partition and group themselves, EndTxn v5 answers the next epoch, whose
    markers fence a late batch of the ended transaction; DescribeProducers shows the bump."""
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")

    async def produce(batch, version=12):
        body = await _call(client, 0, version, dict(transactional_id="app", acks=-1, timeout=5000, topic_data=[
            dict(name="t", partition_data=[dict(index=0, records=batch)])]))
        return body.responses[0].partition_responses[0].error_code

    async def end(producer, commit):
        body = await _call(client, 26, 5, dict(transactional_id="app", producer_id=producer[0],
                                               producer_epoch=producer[1], committed=commit))
        return body.error_code, (body.producer_id, body.producer_epoch)

    async def producer_epochs():
        body = await _call(client, 61, 0, dict(topics=[dict(name="t", partition_indexes=[0])]))
        return [(p.producer_id, p.producer_epoch) for p in body.topics[0].partitions[0].active_producers]

    producer = await _init(client, "app", version=5)
    assert await produce(_txn_batch(producer, [b"old-protocol"]), version=11) == ErrorCode.invalid_txn_state
    assert await produce(_txn_batch(producer, [b"a", b"b"])) == ErrorCode.none  # no AddPartitionsToTxn
    body = await _call(client, 28, 5, dict(transactional_id="app", group_id="g", producer_id=producer[0],
                                           producer_epoch=producer[1], generation_id=-1, member_id="",
                                           group_instance_id=None, topics=[dict(name="t", partitions=[dict(
                                               partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                                               committed_metadata=None)])]))
    assert body.topics[0].partitions[0].error_code == ErrorCode.none  # no AddOffsetsToTxn
    code, following = await end(producer, commit=True)
    assert (code, following) == (ErrorCode.none, (producer[0], producer[1] + 1))
    assert await end(producer, commit=True) == (ErrorCode.none, following)  # a retry: the same answer
    assert await producer_epochs() == [following]  # the marker carried the next epoch
    # A batch of the ended transaction arriving late is fenced, not a hanging transaction.
    assert await produce(_txn_batch(producer, [b"late"], sequence=2)) == ErrorCode.invalid_producer_epoch
    assert await produce(_txn_batch(following, [b"c"])) == ErrorCode.none  # the next transaction, sequence 0
    code, after_abort = await end(following, commit=False)
    assert (code, after_abort) == (ErrorCode.none, (producer[0], producer[1] + 2))
    assert await producer_epochs() == [after_abort]
    code, after_empty = await end(after_abort, commit=False)  # an abort with nothing begun bumps too
    assert (code, after_empty) == (ErrorCode.none, (producer[0], producer[1] + 3))
    answer = await _fetch(client, "t", 1)
    data = bytes(answer.records or b"")
    values = [(r.offset, r.value) for h in split_batches(data) if not h.is_control
              for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))]
    assert values == [(0, b"a"), (1, b"b"), (3, b"c")]  # a, b, their marker, c, its marker
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(producer[0], 3)]
    assert answer.last_stable_offset == answer.high_watermark == 5
    body = await _call(client, 9, 7, dict(group_id="g", topics=[dict(name="t", partition_indexes=[0])],
                                          require_stable=True))
    assert body.topics[0].partitions[0].committed_offset == 7


async def test_the_admin_apis_describe_transactions_and_producers(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    await _produce(client, "t", _txn_batch(producer, [b"a", b"b"]), "app")
    body = await _call(client, 65, 0, dict(transactional_ids=["app", "nobody"]))
    app, nobody = body.transaction_states
    assert (app.transaction_state, app.producer_id, [(t.topic, list(t.partitions)) for t in app.topics]) == \
        ("Ongoing", producer[0], [("t", [0])])
    assert nobody.error_code == ErrorCode.transactional_id_not_found
    body = await _call(client, 66, 1, dict(state_filters=["Ongoing", "Bogus"], producer_id_filters=[],
                                           duration_filter=-1))
    assert [(t.transactional_id, t.transaction_state) for t in body.transaction_states] == [("app", "Ongoing")]
    assert list(body.unknown_state_filters) == ["Bogus"]
    body = await _call(client, 61, 0, dict(topics=[dict(name="t", partition_indexes=[0])]))
    [state] = body.topics[0].partitions[0].active_producers
    assert (state.producer_id, state.current_txn_start_offset, state.last_sequence) == (producer[0], 0, 1)
    # An operator aborts the hanging transaction's partition with WriteTxnMarkers (kafka-transactions.sh abort).
    body = await _call(client, 27, 1, dict(markers=[dict(producer_id=producer[0], producer_epoch=producer[1],
                                                         transaction_result=False, coordinator_epoch=0,
                                                         topics=[dict(name="t", partition_indexes=[0])])]))
    assert body.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
    answer = await _fetch(client, "t", 1)
    assert answer.last_stable_offset == answer.high_watermark == 3
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(producer[0], 0)]


@pytest.mark.parametrize("key_type, code", [(1, ErrorCode.none), (5, ErrorCode.invalid_request)])
async def test_find_coordinator_for_transactional_ids(nursery, key_type, code):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    body = await _call(client, 10, 4, dict(key_type=key_type, coordinator_keys=["app"]))
    assert body.coordinators[0].error_code == code


async def test_the_cleaner_removes_aborted_records_and_leaves_open_transactions_alone(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "c", cleanup_policy="compact", min_cleanable_dirty_ratio="0.01")
    plain = await _call(client, 0, 9, dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[dict(
        name="c", partition_data=[dict(index=0, records=build_batch([(b"k1", b"committed-v1")]))])]))
    assert plain.responses[0].partition_responses[0].error_code == ErrorCode.none
    aborter = await _init(client, "aborter")
    await _add(client, "aborter", aborter, {"c": [0]})
    batch = build_batch([(b"k1", b"aborted-v2")], producer_id=aborter[0], producer_epoch=aborter[1],
                        base_sequence=0, transactional=True)
    assert (await _produce(client, "c", batch, "aborter")).error_code == ErrorCode.none
    assert await _end(client, "aborter", aborter, commit=False) == ErrorCode.none
    opener = await _init(client, "opener")
    await _add(client, "opener", opener, {"c": [0]})
    batch = build_batch([(b"k2", b"open-v3")], producer_id=opener[0], producer_epoch=opener[1], base_sequence=0,
                        transactional=True)
    assert (await _produce(client, "c", batch, "opener")).error_code == ErrorCode.none
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    await logs.cleaner.pass_once(everything=True)

    def values(answer):
        data = bytes(answer.records or b"")
        return [r.value for h in split_batches(data) if not h.is_control
                for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))]

    # The open transaction holds cleaning back: nothing is removed yet.
    assert values(await _fetch(client, "c", 0)) == [b"committed-v1", b"aborted-v2", b"open-v3"]
    assert await _end(client, "opener", opener, commit=True) == ErrorCode.none
    await logs.compactor.pass_once(everything=True)
    await logs.cleaner.pass_once(everything=True)
    # The aborted record goes, and never superseded the committed value of its key.
    assert values(await _fetch(client, "c", 0)) == [b"committed-v1", b"open-v3"]
    assert values(await _fetch(client, "c", 1)) == [b"committed-v1", b"open-v3"]
    assert logs.cleaner.stats.records_removed == 1


async def test_a_transaction_begun_after_the_stored_state_is_found_again_at_load(nursery):
    """As if the gateway died between storing a transaction's first batch and storing the
    partition's transaction state: loading the partition finds the open transaction in the
    batches after the stored state, holds the last stable offset there, and stores it."""
    from kafscale.protocol.layout import transaction_state_key
    from kafscale.protocol.transactions import PartitionTransactions

    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    plain = build_batch([(None, b"before")])
    assert (await _call(client, 0, 9, dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[dict(
        name="t", partition_data=[dict(index=0, records=plain)])]))).responses[0].partition_responses[0].error_code == 0
    assert (await _produce(client, "t", _txn_batch(producer, [b"open"]), "app")).error_code == ErrorCode.none
    logs = running.context.logs
    key = transaction_state_key("kafscale", "t", 0)
    await logs.store.delete(key)  # the state as it was before the batch: none
    await logs.release("t", 0)
    reloaded = await logs.get("t", 0)
    assert reloaded.open_transactions() == {producer[0]: 1} and reloaded.last_stable_offset == 1
    assert PartitionTransactions.decode(await logs.store.get(key)).open == {producer[0]: 1}
    assert await _end(client, "app", producer, commit=False) == ErrorCode.none
    answer = await _fetch(client, "t", 1)
    assert answer.last_stable_offset == answer.high_watermark == 3
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(producer[0], 1)]


async def test_a_transaction_whose_coordinator_record_is_lost_does_not_hold_the_lso_forever(nursery):
    """A partition's open transaction whose producer has no unfinished transaction at the
    coordinator (its record lost, or restored from an older backup) is aborted by the sweep
    twice transaction_max_timeout_ms after it was seen open."""
    running, _ = await start_gateway(nursery, transaction_max_timeout_ms=100)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app", timeout_ms=100)
    await _add(client, "app", producer, {"t": [0]})
    assert (await _produce(client, "t", _txn_batch(producer, [b"orphan"]), "app")).error_code == ErrorCode.none
    coordinator = running.context.transactions
    store = running.context.logs.store
    for item in await store.list("kafscale/~meta/transactions/"):
        await store.delete(item.key)  # the coordinator's record is gone
    await coordinator.load()
    await coordinator.sweep()
    assert (await _fetch(client, "t", 1)).last_stable_offset == 0  # not yet: seen open only just now
    await trio.sleep(0.25)
    await coordinator.sweep()
    answer = await _fetch(client, "t", 1)
    assert answer.last_stable_offset == answer.high_watermark == 2
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(producer[0], 0)]


async def test_absurd_transaction_requests_get_kafka_errors_and_the_gateway_serves_on(nursery):
    """What an attacker sends: ids that are not anyone's, negative and maximal epochs,
    enormous transactional ids and partition lists, offsets for groups never added."""
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    long_id = "x" * 30_000
    body = await _call(client, 22, 4, dict(transactional_id=long_id, transaction_timeout=1000, producer_id=-1,
                                           producer_epoch=-1))
    assert body.error_code == ErrorCode.none  # any string is a transactional id, as in Kafka
    huge = await _add(client, long_id, (body.producer_id, body.producer_epoch), {"t": list(range(100_000))})
    assert huge[("t", 0)] == ErrorCode.operation_not_attempted and huge[("t", 99_999)] == \
        ErrorCode.unknown_topic_or_partition
    for pid, epoch in [(-1, -1), (2**63 - 1, 2**15 - 1), (0, -32768)]:
        assert set((await _add(client, "nobody", (pid, epoch), {"t": [0]})).values()) == \
            {ErrorCode.invalid_producer_id_mapping}
        assert await _end(client, "nobody", (pid, epoch), commit=True) == ErrorCode.invalid_producer_id_mapping
    producer = await _init(client, "app")
    body = await _call(client, 28, 3, dict(transactional_id="app", group_id="never-added", producer_id=producer[0],
                                           producer_epoch=producer[1], generation_id=-1, member_id="",
                                           group_instance_id=None, topics=[dict(name="t", partitions=[dict(
                                               partition_index=0, committed_offset=-5, committed_leader_epoch=-1,
                                               committed_metadata=None)])]))
    assert body.topics[0].partitions[0].error_code == ErrorCode.invalid_txn_state
    body = await _call(client, 27, 1, dict(markers=[dict(producer_id=-7, producer_epoch=-1, transaction_result=True,
                                                         coordinator_epoch=-1, topics=[dict(
                                                             name="missing", partition_indexes=[0, -1])])]))
    assert {p.error_code for p in body.markers[0].topics[0].partitions} == {ErrorCode.unknown_topic_or_partition}
    body = await _call(client, 65, 0, dict(transactional_ids=["", "y" * 30_000]))
    assert [s.error_code for s in body.transaction_states] == [ErrorCode.transactional_id_not_found] * 2
    body = await _call(client, 61, 0, dict(topics=[dict(name="t", partition_indexes=[0, 5, -1])]))
    assert [p.error_code for p in body.topics[0].partitions] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                                                                 ErrorCode.unknown_topic_or_partition]
    # And it serves on: a transaction still commits.
    await _add(client, "app", producer, {"t": [0]})
    assert (await _produce(client, "t", _txn_batch(producer, [b"fine"]), "app")).error_code == ErrorCode.none
    assert await _end(client, "app", producer, commit=True) == ErrorCode.none


async def test_delete_records_past_an_open_transaction_keeps_the_lso_at_the_log_start(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})

    async def plain(value):
        body = await _call(client, 0, 9, dict(transactional_id=None, acks=-1, timeout=5000, topic_data=[dict(
            name="t", partition_data=[dict(index=0, records=build_batch([(None, value)]))])]))
        assert body.responses[0].partition_responses[0].error_code == ErrorCode.none

    await plain(b"p0")
    assert (await _produce(client, "t", _txn_batch(producer, [b"open-1"]), "app")).error_code == ErrorCode.none
    await plain(b"p2")
    await plain(b"p3")
    assert (await _produce(client, "t", _txn_batch(producer, [b"open-4"], 1), "app")).error_code == ErrorCode.none
    assert (await _fetch(client, "t", 1)).last_stable_offset == 1
    body = await _call(client, 21, 2, dict(topics=[dict(name="t", partitions=[dict(partition_index=0, offset=3)])],
                                           timeout=5000))
    assert body.topics[0].partitions[0].low_watermark == 3
    part = await _fetch(client, "t", 1, offset=3)
    assert (part.error_code, part.last_stable_offset, part.log_start_offset, part.records or b"") == \
        (ErrorCode.none, 3, 3, b"")  # open-4 stays hidden
    assert await _end(client, "app", producer, commit=True) == ErrorCode.none
    part = await _fetch(client, "t", 1, offset=3)
    assert (part.error_code, part.last_stable_offset) == (ErrorCode.none, 6)  # past the marker
    data = bytes(part.records)
    assert [r.value for h in split_batches(data) if not h.is_control
            for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))] == [b"p3", b"open-4"]


async def test_a_read_committed_long_poll_wakes_when_the_transaction_commits(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    reader = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    assert (await _produce(client, "t", _txn_batch(producer, [b"v"]), "app")).error_code == ErrorCode.none
    answered = {}

    async def long_poll():
        started = trio.current_time()
        body = await _call(reader, 1, 12, dict(
            replica_id=-1, max_wait=10_000, min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=0,
            session_epoch=-1, topics=[dict(topic="t", partitions=[dict(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
        answered["after"] = trio.current_time() - started
        answered["part"] = body.responses[0].partitions[0]

    async with trio.open_nursery() as waiting:
        waiting.start_soon(long_poll)
        await trio.sleep(0.3)
        assert not answered  # held at the last stable offset: nothing to return yet
        assert await _end(client, "app", producer, commit=True) == ErrorCode.none
    assert answered["after"] < 3 and answered["part"].last_stable_offset == 2 and answered["part"].records


async def test_a_damaged_transaction_state_is_rebuilt_from_the_whole_log(nursery, tmp_path, monkeypatch):
    """Issue 38 item 2: an unreadable transactions.json was replaced by the state of the newest
    producer_scan_bytes of the log alone, and an older aborted transaction's records were
    served to read_committed consumers as committed."""
    from tests.support.kafka_reading import read_to_end

    settings = dict(storage=f"file://{tmp_path}", fsync=False, producer_scan_bytes=4096, linger_ms=0)
    running, shutdown = await start_gateway(nursery, **settings)
    client = await Client.connect(running.port)
    await create_topic(client, "t")
    producer = await _init(client, "app")
    await _add(client, "app", producer, {"t": [0]})
    aborted = [b"aborted-%d" % i for i in range(10)]
    assert (await _produce(client, "t", _txn_batch(producer, aborted), "app")).error_code == ErrorCode.none
    assert await _end(client, "app", producer, commit=False) == ErrorCode.none
    for i in range(40):  # far past the scan window: 40 flushes of ~1 KiB
        answer = await _produce(client, "t", build_batch([(None, b"plain-%02d-" % i + b"x" * 1000)]), None)
        assert answer.error_code == ErrorCode.none
    await running.context.logs.compactor.pass_once(everything=True)
    shutdown.set()
    with trio.fail_after(10):
        while running.context.ready:
            await trio.sleep(0.01)
    (state,) = list(tmp_path.rglob("transactions.json"))
    state.write_bytes(b'{"version": 1, "open": [')  # torn
    from kafscale.gateway.http import readiness
    from kafscale.gateway.log import recovery

    release = trio.Event()
    rebuild = recovery._transactions_from_whole_log

    async def held_rebuild(partition_log):  # long, as over a large log: /readyz says so meanwhile
        await release.wait()
        return await rebuild(partition_log)

    monkeypatch.setattr(recovery, "_transactions_from_whole_log", held_rebuild)
    running, _ = await start_gateway(nursery, **settings)
    reader = await Client.connect(running.port)
    answers: list = []

    async def fetch() -> None:
        answers.append(await _fetch(reader, "t", 1))

    nursery.start_soon(fetch)
    with trio.fail_after(10):
        while not running.context.logs.damage.rebuilding:
            await trio.sleep(0.01)
    ok, reason = await readiness(running.context)
    assert ok and "rebuilding the transaction state of kafscale/t/0" in reason
    assert running.context.metrics.registry.get_sample_value("kafscale_transaction_state_rebuilds") == 1
    release.set()
    with trio.fail_after(10):
        while not answers:
            await trio.sleep(0.01)
    answer = answers[0]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(producer[0], 0)]
    bootstrap = f"127.0.0.1:{running.port}"
    values = [m.value() for m in await trio.to_thread.run_sync(read_to_end, bootstrap, "t", 1)]
    assert len(values) == 40 and not any(v.startswith(b"aborted") for v in values)
    assert any(key.endswith("transactions.json") for key in running.context.logs.damage.found)


async def test_cleaning_drops_the_aborted_spans_it_made_needless(nursery, tmp_path):
    """Issue 38 item 2: transactions.json kept every aborted span of a compacted topic for
    ever and was rewritten whole at each marker. Once cleaning removed an aborted
    transaction's records, its span goes too: the stored state stays the size of what is
    not cleaned yet, and no reader sees an aborted record."""
    import json

    running, _ = await start_gateway(nursery, storage=f"file://{tmp_path}", fsync=False, linger_ms=0)
    client = await Client.connect(running.port)
    await create_topic(client, "c", cleanup_policy="compact")
    producer = await _init(client, "app")
    for i in range(20):
        producer = await _init(client, "app")  # a new epoch each time
        await _add(client, "app", producer, {"c": [0]})
        batch = build_batch([(b"k%d" % i, b"aborted-%d" % i)], producer_id=producer[0], producer_epoch=producer[1],
                            base_sequence=0, transactional=True)
        assert (await _produce(client, "c", batch, "app")).error_code == ErrorCode.none
        assert await _end(client, "app", producer, commit=False) == ErrorCode.none
        kept = build_batch([(b"k%d" % i, b"kept-%d" % i)])
        assert (await _produce(client, "c", kept, None)).error_code == ErrorCode.none
    (state,) = list(tmp_path.rglob("transactions.json"))
    assert len(json.loads(state.read_bytes())["aborted"]) == 20
    logs = running.context.logs
    await logs.compactor.pass_once(everything=True)
    await logs.cleaner.pass_once(everything=True)
    assert json.loads(state.read_bytes())["aborted"] == []
    for isolation in (0, 1):
        data = bytes((await _fetch(client, "c", isolation)).records or b"")
        values = [r.value for h in split_batches(data) if not h.is_control
                  for r in iter_records(data[h.position:h.position + h.size], h.at(position=0))]
        assert values == [b"kept-%d" % i for i in range(20)]
