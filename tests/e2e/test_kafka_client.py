"""kafscale.kafka_client (the Spark sink's producer) against a real gateway, checked by
librdkafka: where keys land, a transaction ended from another process, fencing."""

import pytest
from confluent_kafka import Producer as RdProducer
from confluent_kafka.admin import AdminClient, NewTopic

from kafscale.kafka_client import Cluster, ClusterError
from kafscale.kafka_client.partitioner import murmur2, partition_for_key
from kafscale.kafka_client.producer import Producer, end_transaction
from kafscale.protocol.errors import ErrorCode
from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_reading import read_to_end


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    running = GatewayProcess(tmp_path_factory.mktemp("client") / "data").start()
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    for future in admin.create_topics([NewTopic("keys", 7, 1), NewTopic("txn", 2, 1)]).values():
        future.result(10)
    yield running
    running.kill()


def test_murmur2_matches_kafka_reference_values():
    # Values of Kafka's Utils.murmur2 (its unit test's inputs), as unsigned 32-bit numbers.
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == -985981536 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") == -1486304829 & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971 & 0xFFFFFFFF
    assert murmur2(b"abc") == 479470107


def test_keys_land_where_librdkafka_puts_them(gateway):
    with Cluster(gateway.bootstrap) as cluster:
        producer = Producer(cluster)
        for i in range(200):
            producer.send("keys", b"key-%d" % i, b"ours")
        producer.flush()
    theirs = RdProducer({"bootstrap.servers": gateway.bootstrap, "partitioner": "murmur2_random"})
    for i in range(200):
        theirs.produce("keys", key=b"key-%d" % i, value=b"theirs")
    assert theirs.flush(10) == 0
    placed: dict[tuple[bytes, bytes], int] = {}
    for message in read_to_end(gateway.bootstrap, "keys", 7):
        placed[(message.key(), message.value())] = message.partition()
    for i in range(200):
        key = b"key-%d" % i
        assert placed[(key, b"ours")] == placed[(key, b"theirs")] == partition_for_key(key, 7)


def test_a_transaction_is_ended_by_another_process_and_a_new_epoch_fences_the_old(gateway):
    with Cluster(gateway.bootstrap) as tasks, Cluster(gateway.bootstrap) as driver:
        committed = Producer(tasks, transactional_id="task-0")
        for i in range(10):
            committed.send("txn", None, b"c%d" % i, partition=0)
        committed.flush()
        aborted = Producer(tasks, transactional_id="task-1")
        aborted.send("txn", None, b"a", partition=1)
        aborted.flush()
        assert read_to_end(gateway.bootstrap, "txn", 2) == []  # both open: nothing committed yet
        end_transaction(driver, "task-0", committed.identity, commit=True)
        end_transaction(driver, "task-0", committed.identity, commit=True)  # a retried commit is answered alike
        end_transaction(driver, "task-1", aborted.identity, commit=False)
        assert [m.value() for m in read_to_end(gateway.bootstrap, "txn", 2)] == [b"c%d" % i for i in range(10)]

        old = Producer(tasks, transactional_id="task-2")
        old.send("txn", None, b"old", partition=0)
        old.flush()
        Producer(tasks, transactional_id="task-2")  # a retried task: fences and aborts the old attempt
        with pytest.raises(ClusterError) as fenced:
            end_transaction(driver, "task-2", old.identity, commit=True)
        assert fenced.value.code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)
        assert b"old" not in [m.value() for m in read_to_end(gateway.bootstrap, "txn", 2)]
