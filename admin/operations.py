"""What the admin command asks a cluster, one function per question, each returning plain
rows (dicts) for the output: nothing here prints or parses arguments."""

from __future__ import annotations

import os
from collections.abc import Callable

from kafscale.kafka_client import Cluster, ClusterError
from kafscale.kafka_client.cluster import GROUP, TRANSACTION
from kafscale.kafka_client.connection import BrokerConnection
from kafscale.kafka_client.groups import commit_offsets, committed_offsets
from kafscale.protocol.acl_codes import Operation, PatternType, Permission, ResourceType
from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode
from kafscale.protocol.scram import mechanism_code, mechanism_name, salted_password

__all__ = ["brokers", "list_topics", "describe_topic", "create_topic", "delete_topic", "alter_topic_configs",
           "list_groups", "describe_group", "reset_offsets", "list_transactions", "describe_transaction",
           "end_offsets", "list_acls", "create_acl", "delete_acls", "list_users", "upsert_user", "delete_user",
           "find_hanging", "abort_transaction", "AdminError"]

_TOPIC, _BROKER = 2, 4  # config resource types
_EARLIEST, _LATEST = -2, -1


class AdminError(Exception):
    """The cluster refused or failed an operation; the message says which and why."""


def _checked(code: int, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise AdminError(f"{what}: {ErrorCode(code).name}" + (f" ({message})" if message else ""))


def _metadata(cluster: Cluster, topics: list[str] | None):
    return cluster.call(cluster.any_broker(), ApiKey.METADATA, 12, {
        "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def brokers(cluster: Cluster) -> list[dict]:
    answer = _metadata(cluster, [])
    return [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
             "controller": b.node_id == answer.controller_id} for b in sorted(answer.brokers, key=lambda b: b.node_id)]


def list_topics(cluster: Cluster, *, internal: bool = False) -> list[dict]:
    answer = _metadata(cluster, None)
    return [{"topic": t.name, "partitions": len(t.partitions), "internal": t.is_internal}
            for t in sorted(answer.topics, key=lambda t: t.name) if internal or not t.is_internal]


def end_offsets(cluster: Cluster, partitions: list[tuple[str, int]], which: int = _LATEST) -> dict[tuple[str, int], int]:
    """Each partition's log end (``which`` -1) or log start (-2), asked of its leader."""
    by_leader: dict[int, tuple[BrokerConnection, list[tuple[str, int]]]] = {}
    for topic, partition in partitions:
        leader = cluster.leader(topic, partition)
        by_leader.setdefault(id(leader), (leader, []))[1].append((topic, partition))
    found: dict[tuple[str, int], int] = {}
    for leader, owned in by_leader.values():
        topics: dict[str, list[dict]] = {}
        for topic, partition in owned:
            topics.setdefault(topic, []).append({"partition_index": partition, "current_leader_epoch": -1,
                                                 "timestamp": which})
        answer = cluster.call(leader, ApiKey.LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()]})
        for topic in answer.topics:
            for result in topic.partitions:
                _checked(result.error_code, f"ListOffsets {topic.name}-{result.partition_index}")
                found[(topic.name, result.partition_index)] = result.offset
    return found


def describe_topic(cluster: Cluster, name: str) -> dict:
    answer = _metadata(cluster, [name])
    (topic,) = answer.topics
    _checked(topic.error_code, f"topic {name}")
    partitions = sorted(p.partition_index for p in topic.partitions)
    starts = end_offsets(cluster, [(name, p) for p in partitions], _EARLIEST)
    ends = end_offsets(cluster, [(name, p) for p in partitions], _LATEST)
    leaders = {p.partition_index: p.leader_id for p in topic.partitions}
    configs = cluster.call(cluster.any_broker(), ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": _TOPIC, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}).results[0]
    _checked(configs.error_code, f"DescribeConfigs {name}", configs.error_message)
    return {"topic": name, "topic_id": str(topic.topic_id), "internal": topic.is_internal,
            "partitions": [{"partition": p, "leader": leaders[p], "log_start": starts[(name, p)],
                            "log_end": ends[(name, p)]} for p in partitions],
            "configs": {c.name: c.value for c in configs.configs if not c.is_sensitive}}


def create_topic(cluster: Cluster, name: str, partitions: int, configs: dict[str, str]) -> dict:
    answer = cluster.call(cluster.any_broker(), ApiKey.CREATE_TOPICS, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30_000, "validate_only": False})
    (result,) = answer.topics
    _checked(result.error_code, f"CreateTopics {name}", result.error_message)
    return {"topic": name, "partitions": result.num_partitions, "created": True}


def delete_topic(cluster: Cluster, name: str) -> dict:
    answer = cluster.call(cluster.any_broker(), ApiKey.DELETE_TOPICS, 6, {
        "topics": [{"name": name, "topic_id": None}], "timeout": 30_000})
    (result,) = answer.responses
    _checked(result.error_code, f"DeleteTopics {name}", result.error_message)
    return {"topic": name, "deleted": True}


def alter_topic_configs(cluster: Cluster, name: str, set_: dict[str, str], delete: list[str]) -> dict:
    entries = [{"name": k, "config_operation": 0, "value": v} for k, v in set_.items()]
    entries += [{"name": k, "config_operation": 1, "value": None} for k in delete]
    answer = cluster.call(cluster.any_broker(), ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": _TOPIC, "resource_name": name, "configs": entries}], "validate_only": False})
    (result,) = answer.responses
    _checked(result.error_code, f"IncrementalAlterConfigs {name}", result.error_message)
    return {"topic": name, "set": set_, "deleted": delete}


def list_groups(cluster: Cluster) -> list[dict]:
    found: dict[str, dict] = {}
    for node in list(brokers(cluster)):
        answer = cluster.call(cluster.node(node["node_id"]), ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        _checked(answer.error_code, f"ListGroups on node {node['node_id']}")
        for group in answer.groups:
            found[group.group_id] = {"group": group.group_id, "protocol_type": group.protocol_type,
                                     "state": group.group_state, "coordinator": node["node_id"]}
    return [found[name] for name in sorted(found)]


def describe_group(cluster: Cluster, group_id: str) -> dict:
    """The group's state and members, and per partition it committed: committed offset,
    log end and lag (end − committed)."""
    coordinator = cluster.coordinator(GROUP, group_id)
    answer = cluster.call(coordinator, ApiKey.DESCRIBE_GROUPS, 5,
                          {"groups": [group_id], "include_authorized_operations": False})
    (group,) = answer.groups
    if group.error_code == ErrorCode.group_id_not_found:  # a consumer-protocol group (KIP-848), as Kafka 4
        described = _consumer_group(cluster, coordinator, group_id)
    else:
        _checked(group.error_code, f"DescribeGroups {group_id}")
        described = {"state": group.group_state, "protocol_type": group.protocol_type, "protocol": group.protocol_data,
                     "members": [{"member_id": m.member_id, "instance_id": m.group_instance_id,
                                  "client_id": m.client_id, "host": m.client_host} for m in group.members]}
    fetched = cluster.call(cluster.coordinator(GROUP, group_id), ApiKey.OFFSET_FETCH, 8, {
        "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None}],
        "require_stable": False}).groups[0]
    _checked(fetched.error_code, f"OffsetFetch {group_id}")
    committed = {(t.name, p.partition_index): p.committed_offset for t in fetched.topics for p in t.partitions
                 if p.committed_offset >= 0}
    ends = end_offsets(cluster, sorted(committed)) if committed else {}
    return {"group": group_id, **described,
            "offsets": [{"topic": topic, "partition": partition, "committed": offset,
                         "log_end": ends[(topic, partition)], "lag": max(0, ends[(topic, partition)] - offset)}
                        for (topic, partition), offset in sorted(committed.items())]}


def _consumer_group(cluster: Cluster, coordinator, group_id: str) -> dict:
    """A consumer-protocol group described by ConsumerGroupDescribe: its assignor for the
    protocol, and each member's epoch and partitions."""
    (group,) = cluster.call(coordinator, ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                            {"group_ids": [group_id], "include_authorized_operations": False}).groups
    _checked(group.error_code, f"ConsumerGroupDescribe {group_id}", group.error_message)
    return {"state": group.group_state, "protocol_type": "consumer", "protocol": group.assignor_name,
            "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                         "host": m.client_host, "member_epoch": m.member_epoch,
                         "partitions": sorted(f"{tp.topic_name}-{p}" for tp in m.assignment.topic_partitions
                                              for p in tp.partitions)} for m in group.members]}


def reset_offsets(cluster: Cluster, group_id: str, topic: str, to: str, *,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> list[dict]:
    """Set the group's offsets of every partition of ``topic`` to ``earliest``, ``latest`` or
    a number. Kafka refuses it while the group has members (the group must be empty)."""
    cluster.refresh([topic])
    count = cluster.partition_count(topic)
    partitions = [(topic, p) for p in range(count)]
    if to in ("earliest", "latest"):
        targets = end_offsets(cluster, partitions, _EARLIEST if to == "earliest" else _LATEST)
    else:
        targets = dict.fromkeys(partitions, int(to))
    before = committed_offsets(cluster, group_id, partitions, require_stable=False)
    try:
        for done, chunk_start in enumerate(range(0, count, 100)):
            chunk = partitions[chunk_start:chunk_start + 100]
            commit_offsets(cluster, group_id, {tp: targets[tp] for tp in chunk})
            progress(min(count, (done + 1) * 100), count)
    except ClusterError as exc:
        raise AdminError(f"resetting {group_id} on {topic}: {exc}"
                         + (" (stop the group's consumers first)" if exc.code == ErrorCode.unknown_member_id
                            or exc.code == ErrorCode.rebalance_in_progress else "")) from None
    return [{"topic": t, "partition": p, "before": before.get((t, p)), "after": targets[(t, p)]}
            for t, p in partitions]


def list_transactions(cluster: Cluster) -> list[dict]:
    found = []
    for node in brokers(cluster):
        answer = cluster.call(cluster.node(node["node_id"]), ApiKey.LIST_TRANSACTIONS, 1, {
            "state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        _checked(answer.error_code, f"ListTransactions on node {node['node_id']}")
        found += [{"transactional_id": t.transactional_id, "producer_id": t.producer_id, "state": t.transaction_state,
                   "coordinator": node["node_id"]} for t in answer.transaction_states]
    return sorted(found, key=lambda row: row["transactional_id"])


def describe_transaction(cluster: Cluster, transactional_id: str) -> dict:
    answer = cluster.call(cluster.coordinator(TRANSACTION, transactional_id), ApiKey.DESCRIBE_TRANSACTIONS, 0,
                          {"transactional_ids": [transactional_id]})
    (state,) = answer.transaction_states
    _checked(state.error_code, f"DescribeTransactions {transactional_id}")
    return {"transactional_id": transactional_id, "state": state.transaction_state, "producer_id": state.producer_id,
            "producer_epoch": state.producer_epoch, "timeout_ms": state.transaction_timeout,
            "start_ms": state.transaction_start_time,
            "partitions": sorted(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)}



# -- ACLs and SCRAM users ---------------------------------------------------------------------

def _acl_filter(resource_type: str, name: str | None, pattern: str, principal: str | None, host: str | None,
                operation: str, permission: str) -> dict:
    return {"resource_type_filter": ResourceType[resource_type.upper()], "resource_name_filter": name,
            "pattern_type_filter": PatternType[pattern.upper()], "principal_filter": principal, "host_filter": host,
            "operation": Operation[operation.upper()], "permission_type": Permission[permission.upper()]}


def _acl_row(resource, acl) -> dict:
    return {"resource_type": ResourceType(resource.resource_type).name, "resource": resource.resource_name,
            "pattern": PatternType(resource.pattern_type).name, "principal": acl.principal, "host": acl.host,
            "operation": Operation(acl.operation).name, "permission": Permission(acl.permission_type).name}


def list_acls(cluster: Cluster, resource_type: str = "any", name: str | None = None,
              principal: str | None = None) -> list[dict]:
    answer = cluster.call(cluster.any_broker(), ApiKey.DESCRIBE_ACLS, 3,
                          _acl_filter(resource_type, name, "any", principal, None, "any", "any"))
    _checked(answer.error_code, "DescribeAcls", answer.error_message)
    return [_acl_row(resource, acl) for resource in answer.resources for acl in resource.acls]


def create_acl(cluster: Cluster, resource_type: str, name: str, pattern: str, principal: str, host: str,
               operation: str, permission: str) -> dict:
    creation = {"resource_type": ResourceType[resource_type.upper()], "resource_name": name,
                "resource_pattern_type": PatternType[pattern.upper()], "principal": principal, "host": host,
                "operation": Operation[operation.upper()], "permission_type": Permission[permission.upper()]}
    (result,) = cluster.call(cluster.any_broker(), ApiKey.CREATE_ACLS, 3, {"creations": [creation]}).results
    _checked(result.error_code, "CreateAcls", result.error_message)
    return {"resource_type": resource_type.upper(), "resource": name, "pattern": pattern.upper(),
            "principal": principal, "host": host, "operation": operation.upper(), "permission": permission.upper()}


def delete_acls(cluster: Cluster, resource_type: str, name: str | None, pattern: str, principal: str | None,
                host: str | None, operation: str, permission: str) -> list[dict]:
    answer = cluster.call(cluster.any_broker(), ApiKey.DELETE_ACLS, 3, {"filters": [
        _acl_filter(resource_type, name, pattern, principal, host, operation, permission)]})
    (result,) = answer.filter_results
    _checked(result.error_code, "DeleteAcls", result.error_message)
    return [{"resource_type": ResourceType(m.resource_type).name, "resource": m.resource_name,
             "pattern": PatternType(m.pattern_type).name, "principal": m.principal, "host": m.host,
             "operation": Operation(m.operation).name, "permission": Permission(m.permission_type).name}
            for m in result.matching_acls]




def list_users(cluster: Cluster) -> list[dict]:
    answer = cluster.call(cluster.any_broker(), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
    _checked(answer.error_code, "DescribeUserScramCredentials", answer.error_message)
    rows = []
    for result in sorted(answer.results, key=lambda r: r.user):
        _checked(result.error_code, f"user {result.user}", result.error_message)
        rows += [{"user": result.user, "mechanism": mechanism_name(c.mechanism) or str(c.mechanism),
                  "iterations": c.iterations} for c in result.credential_infos]
    return rows


def upsert_user(cluster: Cluster, user: str, password: str, mechanism: str, iterations: int = 8192) -> dict:
    """Kafka's SCRAM credential: the salted password is derived here, so the password never
    crosses the wire (as kafka-configs does)."""
    code = mechanism_code(mechanism)
    salt = os.urandom(32)
    salted = salted_password(mechanism, password, salt, iterations)
    answer = cluster.call(cluster.any_broker(), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {"name": user, "mechanism": code, "iterations": iterations, "salt": salt, "salted_password": salted}]})
    (result,) = answer.results
    _checked(result.error_code, f"user {user}", result.error_message)
    return {"user": user, "mechanism": mechanism, "iterations": iterations}


def delete_user(cluster: Cluster, user: str, mechanism: str) -> dict:
    answer = cluster.call(cluster.any_broker(), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": user, "mechanism": mechanism_code(mechanism)}], "upsertions": []})
    (result,) = answer.results
    _checked(result.error_code, f"user {user}", result.error_message)
    return {"user": user, "mechanism": mechanism, "deleted": True}


# -- hanging transactions ---------------------------------------------------------------------

def _open_producers(cluster: Cluster, topic: str, partition: int) -> list:
    answer = cluster.call(cluster.leader(topic, partition), ApiKey.DESCRIBE_PRODUCERS, 0, {
        "topics": [{"name": topic, "partition_indexes": [partition]}]})
    (result,) = answer.topics[0].partitions
    _checked(result.error_code, f"DescribeProducers {topic}-{partition}", result.error_message)
    return [p for p in result.active_producers if p.current_txn_start_offset >= 0]


def find_hanging(cluster: Cluster, topic: str) -> list[dict]:
    """Partitions' open transactions that no coordinator has as ongoing on that partition:
    nothing will ever end them (Kafka's ``kafka-transactions.sh find-hanging``)."""
    ongoing: set[tuple[int, str]] = set()
    for listed in list_transactions(cluster):
        if listed["state"] == "Ongoing":
            described = describe_transaction(cluster, listed["transactional_id"])
            ongoing.update((described["producer_id"], name) for name in described["partitions"])
    rows = []
    for partition in range(cluster.partition_count(topic)):
        for producer in _open_producers(cluster, topic, partition):
            if (producer.producer_id, f"{topic}-{partition}") not in ongoing:
                rows.append({"topic": topic, "partition": partition, "producer_id": producer.producer_id,
                             "producer_epoch": producer.producer_epoch,
                             "start_offset": producer.current_txn_start_offset})
    return rows


def abort_transaction(cluster: Cluster, topic: str, partition: int, start_offset: int) -> dict:
    """End the open transaction that starts at ``start_offset`` of the partition with an abort
    marker, written by the partition's leader (WriteTxnMarkers, as Kafka's tool does)."""
    found = [p for p in _open_producers(cluster, topic, partition) if p.current_txn_start_offset == start_offset]
    if not found:
        raise AdminError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
    producer = found[0]
    answer = cluster.call(cluster.leader(topic, partition), ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch, "transaction_result": False,
        "topics": [{"name": topic, "partition_indexes": [partition]}],
        "coordinator_epoch": max(0, producer.coordinator_epoch)}]})
    (result,) = answer.markers[0].topics[0].partitions
    _checked(result.error_code, f"WriteTxnMarkers {topic}-{partition}")
    return {"topic": topic, "partition": partition, "producer_id": producer.producer_id,
            "start_offset": start_offset, "aborted": True}
