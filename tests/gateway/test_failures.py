"""One table from a failure to the Kafka error code a client is answered with."""

import pytest

from kafscale.gateway.etcd import EtcdAuthFailed, EtcdError, EtcdUnavailable
from kafscale.gateway.failures import FAILURES, code_of
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.storage_backends import StorageError


@pytest.mark.parametrize("failure, code", [
    (KafkaError(ErrorCode.topic_already_exists, "exists"), ErrorCode.topic_already_exists),
    (StorageError("the bucket is gone"), ErrorCode.kafka_storage_error),
    (EtcdUnavailable("etcd is unreachable"), ErrorCode.request_timed_out),
    (EtcdAuthFailed("wrong password"), ErrorCode.unknown_server_error),
    (EtcdError("HTTP 500"), ErrorCode.unknown_server_error),
])
def test_each_failure_has_its_code(failure, code):
    assert isinstance(failure, FAILURES)
    assert code_of(failure) == code


def test_etcd_failures_are_not_kafka_errors():
    """Handlers that catch KafkaError do not swallow an etcd failure as if it were the request's."""
    assert not issubclass(EtcdError, KafkaError)
