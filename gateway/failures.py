"""What a client is answered when a request fails: one table from failure to Kafka error code.

Three kinds of failure reach a handler: a :class:`KafkaError` (the request's own error,
carrying its code), a :class:`StorageError` (the object store failed: full, down, refused)
and an :class:`EtcdError` (the cluster's metadata store failed). Anything else is a
defect, answered UNKNOWN_SERVER_ERROR and logged by the connection.
"""

from __future__ import annotations

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.storage_backends import StorageError

from .etcd import EtcdError, EtcdUnavailable

__all__ = ["FAILURES", "code_of"]

# What a handler may answer per topic or partition instead of failing the whole request.
FAILURES = (KafkaError, StorageError, EtcdError)


def code_of(exc: BaseException) -> ErrorCode:
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, StorageError):
        return ErrorCode.kafka_storage_error  # retriable: clients try again
    if isinstance(exc, EtcdUnavailable):
        return ErrorCode.request_timed_out  # retriable: etcd may come back
    return ErrorCode.unknown_server_error
