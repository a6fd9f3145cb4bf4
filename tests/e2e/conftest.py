import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.gateway_process import GatewayProcess


@pytest.fixture(params=["file", "s3"])
def storage_args(request) -> list[str]:
    """The client suites run twice: on the filesystem backend and on a real S3 server (moto)."""
    if request.param == "file":
        return []
    moto = request.getfixturevalue("moto_server")
    # The later --storage wins over the directory GatewayProcess passes first.
    return ["--storage", f"s3://{moto.create_bucket()}/e2e", *moto.gateway_args()]


@pytest.fixture
def gateway(tmp_path, storage_args):
    process = GatewayProcess(tmp_path / "data", *storage_args).start()
    yield process
    process.kill()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def groups_gateway(tmp_path, storage_args):
    """A gateway whose new groups wait 1 s (not Kafka's 3 s) for their first members."""
    process = GatewayProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "1000", *storage_args).start()
    yield process
    process.kill()


def make_topic(gateway, name, partitions=6, messages=300):
    """Create a topic and put ``messages`` values 0..n-1 round-robin over its partitions."""
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(10)
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "acks": "all"})
    for i in range(messages):
        producer.produce(name, key=b"%d" % i, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(10) == 0
