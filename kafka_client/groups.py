"""A group's committed offsets without joining it: what a tool or a Spark query does to
show its progress (OffsetCommit with no generation, as Kafka's admin clients do)."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode

from .cluster import GROUP, Cluster, ClusterError, check

__all__ = ["commit_offsets", "committed_offsets", "UNSTABLE"]

UNSTABLE = ErrorCode.unstable_offset_commit


def commit_offsets(cluster: Cluster, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": None})
    values = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
              "group_instance_id": None, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def attempt() -> None:
        answer = cluster.call(cluster.coordinator(GROUP, group_id), ApiKey.OFFSET_COMMIT, 8, values)
        for topic in answer.topics:
            for result in topic.partitions:
                check(result.error_code, f"OffsetCommit {group_id} {topic.name}-{result.partition_index}")

    cluster.retry(attempt, on_retry=lambda: cluster.forget_coordinator(GROUP, group_id))


def committed_offsets(cluster: Cluster, group_id: str, partitions: list[tuple[str, int]], *,
                      require_stable: bool = True) -> dict[tuple[str, int], int]:
    """The group's committed offsets of ``partitions`` (absent: none committed). With
    ``require_stable``, an offset an unfinished transaction holds is waited for (retried)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    values = {"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                          "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}],
              "require_stable": require_stable}

    def attempt() -> dict[tuple[str, int], int]:
        answer = cluster.call(cluster.coordinator(GROUP, group_id), ApiKey.OFFSET_FETCH, 8, values)
        group = answer.groups[0]
        check(group.error_code, f"OffsetFetch {group_id}")
        found = {}
        for topic in group.topics:
            for result in topic.partitions:
                if result.error_code == UNSTABLE:
                    raise ClusterError(UNSTABLE, f"OffsetFetch {group_id} {topic.name}-{result.partition_index}")
                check(result.error_code, f"OffsetFetch {group_id} {topic.name}-{result.partition_index}")
                if result.committed_offset >= 0:
                    found[(topic.name, result.partition_index)] = result.committed_offset
        return found

    return cluster.retry(attempt, on_retry=lambda: cluster.forget_coordinator(GROUP, group_id))
