"""The API keys and versions Kafscale serves, and the ApiVersions response built from them.

The table is the single source of truth for version negotiation: the gateway
advertises the entries it has handlers for, and :func:`decode_request`
refuses any version outside it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["ApiKey", "VersionRange", "SERVED_VERSIONS", "version_range"]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


# What we decode and answer: every version Apache Kafka 3.9 serves (so clients that infer
# the broker's version from ApiVersions, kafka-python, see 3.9), the old ones kio no longer
# generates through legacy.py; except Produce v0-2 and Fetch v0-3, which carry the pre-v2
# message formats (docs/compatibility.md says why they are refused).
SERVED_VERSIONS: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE: VersionRange(3, 13),  # v12: transactions v2 (KIP-890), the v11 frame; v13: topic ids
    ApiKey.FETCH: VersionRange(4, 18),  # v18 (Kafka 4.1): a replica's high watermark, a tagged field
    ApiKey.LIST_OFFSETS: VersionRange(0, 11),  # v10: a timeout for remote storage (answered at once here); v11: -6
    ApiKey.METADATA: VersionRange(0, 13),  # v13: a top-level error code
    ApiKey.OFFSET_COMMIT: VersionRange(0, 10),  # v10 (Kafka 4.1): topics by id
    ApiKey.OFFSET_FETCH: VersionRange(0, 10),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 6),
    ApiKey.JOIN_GROUP: VersionRange(0, 9),
    ApiKey.HEARTBEAT: VersionRange(0, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 5),
    ApiKey.SYNC_GROUP: VersionRange(0, 5),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6),  # v6 (KIP-1043): an error message per group
    ApiKey.LIST_GROUPS: VersionRange(0, 5),
    ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
    ApiKey.API_VERSIONS: VersionRange(0, 4),
    ApiKey.CREATE_TOPICS: VersionRange(0, 7),
    ApiKey.DELETE_TOPICS: VersionRange(0, 6),
    ApiKey.DELETE_RECORDS: VersionRange(0, 2),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 4),
    ApiKey.END_TXN: VersionRange(0, 5),  # v5: transactions v2, the next producer answered
    ApiKey.WRITE_TXN_MARKERS: VersionRange(1, 2),  # v0 is the pre-flexible form, not in kio
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 5),  # v5: transactions v2, the group added implicitly
    ApiKey.DESCRIBE_CONFIGS: VersionRange(0, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: VersionRange(0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(0, 5),  # v5: cordoned directories (none here)
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 0),  # Kafka 3.9 serves v0
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2),  # v2: fenced brokers (none listed)
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 2),  # v2 (KIP-1152): a transactional id pattern
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
    ApiKey.DESCRIBE_ACLS: VersionRange(1, 3),  # v0 (no pattern types) is pre-2.0 and not in kio
    ApiKey.CREATE_ACLS: VersionRange(1, 3),
    ApiKey.DELETE_ACLS: VersionRange(1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: VersionRange(0, 1),  # KIP-848, the consumer group protocol
    ApiKey.CONSUMER_GROUP_DESCRIBE: VersionRange(0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: VersionRange(0, 0),  # KIP-966, the Java admin's describeTopics
    # Share groups (KIP-932), as Kafka 4.1+ serves them (v0 was 4.0's preview, never served since).
    ApiKey.SHARE_GROUP_HEARTBEAT: VersionRange(1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: VersionRange(1, 1),
    ApiKey.SHARE_FETCH: VersionRange(1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: VersionRange(1, 2),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: VersionRange(0, 1),  # v1: lag (KIP-1226)
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
}


def version_range(api_key: int) -> VersionRange | None:
    try:
        return SERVED_VERSIONS.get(ApiKey(api_key))
    except ValueError:
        return None
