"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics and
groups (KIP-848's group configs), and a read-only view of the broker."""

from __future__ import annotations

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from ..context import RequestContext
from ..failures import FAILURES, code_of
from ..groups.configs import GROUP_CONFIGS, validate_group_configs
from ..security.acl import Operation
from ..topic_configs import (
    DEFAULT_CONFIG,
    LIST_CONFIGS,
    TOPIC_CONFIGS,
    effective_configs,
    option_source,
    validate_topic_configs,
)
from .base import register, respond

TOPIC = 2
BROKER = 4
GROUP = 32
DYNAMIC_GROUP_CONFIG = 8  # ConfigSource of a config set on the group
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _entry(name, value, source, read_only, documentation, include_docs, config_type=0) -> dict:
    return dict(name=name, value=value, read_only=read_only, config_source=source, is_default=source == DEFAULT_CONFIG,
                is_sensitive=False, synonyms=[], config_type=config_type,
                documentation=documentation if include_docs else None)


_BOOLEAN, _STRING, _INT, _LONG, _DOUBLE, _LIST = 1, 2, 3, 5, 6, 7  # Kafka's ConfigType


# Broker configs Kafka 3.9 can change at run time (its DynamicBrokerConfig), so it reports them
# read_only=false (advertised.listeners stays per-broker dynamic until 4.0); all others are read-only.
_DYNAMIC_IN_KAFKA = frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map", "message.max.bytes",
    "log.segment.bytes", "log.retention.ms", "log.retention.bytes", "log.cleanup.policy",
})


def _broker_configs(ctx) -> list[tuple[str, str, int, int]]:
    """The broker settings tools read, under Kafka's names: (name, value, source, type).
    A value set by a gateway option that differs from its default is STATIC_BROKER_CONFIG."""
    config = ctx.config
    host, port = config.network.advertised

    def option(name: str, kafka_name: str, kind: int, value: str | None = None):
        own = config.option(name)
        shown = str(own).lower() if kind == _BOOLEAN else (value or str(own))
        return kafka_name, shown, option_source(config, name), kind

    def fixed(kafka_name: str, value: str, kind: int):
        return kafka_name, value, DEFAULT_CONFIG, kind

    topic_defaults = effective_configs({}, config)
    return [
        option("node_id", "broker.id", _INT, str(ctx.node_id)),
        option("node_id", "node.id", _INT, str(ctx.node_id)),
        option("port", "listeners", _LIST, f"PLAINTEXT://{config.network.host}:{config.network.port}"),
        option("advertised_host", "advertised.listeners", _LIST, f"PLAINTEXT://{host}:{port}"),
        fixed("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT", _LIST),
        fixed("inter.broker.listener.name", "PLAINTEXT", _STRING),
        option("storage", "log.dirs", _LIST, ctx.logs.store.describe()),
        option("max_message_bytes", "message.max.bytes", _INT),
        option("segment_bytes", "log.segment.bytes", _INT),
        fixed("log.retention.ms", topic_defaults["retention.ms"][0], _LONG),
        fixed("log.retention.bytes", topic_defaults["retention.bytes"][0], _LONG),
        option("log_cleanup_policy", "log.cleanup.policy", _LIST),
        fixed("log.cleaner.delete.retention.ms", topic_defaults["delete.retention.ms"][0], _LONG),
        fixed("log.cleaner.min.compaction.lag.ms", topic_defaults["min.compaction.lag.ms"][0], _LONG),
        fixed("log.cleaner.max.compaction.lag.ms", topic_defaults["max.compaction.lag.ms"][0], _LONG),
        fixed("log.cleaner.min.cleanable.ratio", topic_defaults["min.cleanable.dirty.ratio"][0], _DOUBLE),
        option("cleaner_dedupe_buffer_bytes", "log.cleaner.dedupe.buffer.size", _LONG),
        fixed("log.cleaner.enable", "true", _BOOLEAN),
        fixed("compression.type", topic_defaults["compression.type"][0], _STRING),
        fixed("log.message.timestamp.type", topic_defaults["message.timestamp.type"][0], _STRING),
        option("retention_check_interval_ms", "log.retention.check.interval.ms", _LONG),
        option("auto_create_topics", "auto.create.topics.enable", _BOOLEAN),
        option("default_partitions", "num.partitions", _INT),
        fixed("default.replication.factor", "1", _INT),
        fixed("min.insync.replicas", "1", _INT),
        fixed("offsets.topic.replication.factor", "1", _INT),
        fixed("transaction.state.log.replication.factor", "1", _INT),
        option("max_frame_bytes", "socket.request.max.bytes", _INT),
        option("fetch_max_bytes", "fetch.max.bytes", _INT),
        option("connections_max_idle_ms", "connections.max.idle.ms", _LONG),
        option("max_inflight_bytes", "queued.max.request.bytes", _LONG),
        option("group_min_session_timeout_ms", "group.min.session.timeout.ms", _INT),
        option("group_max_session_timeout_ms", "group.max.session.timeout.ms", _INT),
        option("group_initial_rebalance_delay_ms", "group.initial.rebalance.delay.ms", _INT),
        fixed("delete.topic.enable", "true", _BOOLEAN),
    ]


def _describe_error(request: Request, code: ErrorCode):
    return respond(request, dict(results=[
        dict(error_code=code, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name,
             configs=[]) for r in request.body.resources
    ]))


@register(ApiKey.DESCRIBE_CONFIGS, error=_describe_error)
async def handle_describe_configs(ctx: RequestContext, request: Request):
    include_docs = getattr(request.body, "include_documentation", False)
    results = []
    for resource in request.body.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        entries = []
        code, message = ErrorCode.none, None
        if resource.resource_type == TOPIC and not ctx.access.allowed_topic(Operation.DESCRIBE_CONFIGS,
                                                                             resource.resource_name):
            code, message = ErrorCode.topic_authorization_failed, "DESCRIBE_CONFIGS is not allowed"
        elif resource.resource_type == BROKER and not ctx.access.allowed_cluster(Operation.DESCRIBE_CONFIGS):
            code, message = ErrorCode.cluster_authorization_failed, "DESCRIBE_CONFIGS is not allowed"
        elif resource.resource_type == GROUP and not ctx.access.allowed_group(Operation.DESCRIBE_CONFIGS,
                                                                             resource.resource_name):
            code, message = ErrorCode.group_authorization_failed, "DESCRIBE_CONFIGS is not allowed"
        elif resource.resource_type == GROUP:
            entries = _group_configs(ctx, resource.resource_name, include_docs)
        elif resource.resource_type == TOPIC:
            info = ctx.logs.topics().get(resource.resource_name)
            if info is None:
                code, message = ErrorCode.unknown_topic_or_partition, f"unknown topic {resource.resource_name!r}"
            else:
                for name, (value, source) in effective_configs(info.configs, ctx.config).items():
                    spec = TOPIC_CONFIGS[name]
                    entries.append(_entry(name, value, source, False, spec.documentation, include_docs,
                                          spec.config_type))
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(ctx.node_id)):
                code, message = ErrorCode.invalid_request, f"unknown broker {resource.resource_name!r}"
            else:
                for name, value, source, kind in _broker_configs(ctx):
                    entries.append(_entry(name, value, source, name not in _DYNAMIC_IN_KAFKA, None, include_docs, kind))
        else:
            code, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        if keys is not None:
            entries = [e for e in entries if e["name"] in keys]
        results.append(dict(error_code=code, error_message=message, resource_type=resource.resource_type,
                            resource_name=resource.resource_name, configs=entries))
    return respond(request, dict(results=results))


def _alter_error(request: Request, code: ErrorCode):
    return respond(request, dict(responses=[
        dict(error_code=code, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.body.resources
    ]))


def _apply(configs: dict[str, str], operations, broker) -> dict[str, str]:
    """IncrementalAlterConfigs: SET and DELETE any config; APPEND and SUBTRACT list items
    of list-typed configs (cleanup.policy), starting from the effective value, as Kafka does."""
    for item in operations:
        if item.config_operation == SET:
            if item.value is None:  # Kafka: "Null value not supported for : name"
                raise KafkaError(ErrorCode.invalid_request, f"SET of {item.name} has no value (DELETE removes one)")
            configs[item.name] = item.value
        elif item.config_operation == DELETE:
            configs.pop(item.name, None)
        elif item.config_operation in (APPEND, SUBTRACT):
            if item.name not in LIST_CONFIGS:
                raise KafkaError(ErrorCode.invalid_config,
                                 f"{item.name} is not a list; APPEND and SUBTRACT apply to list configs only")
            current = effective_configs(configs, broker)[item.name][0]
            values = [v for v in current.split(",") if v]
            changes = [v.strip() for v in (item.value or "").split(",") if v.strip()]
            if item.config_operation == APPEND:
                values += [v for v in changes if v not in values]
            else:
                values = [v for v in values if v not in changes]
            configs[item.name] = ",".join(values)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {item.config_operation}")
    return configs


async def _alter(ctx: RequestContext, request: Request, incremental: bool):
    validate_only = request.body.validate_only
    responses = []
    for resource in request.body.resources:
        code, message = ErrorCode.none, None
        try:
            if resource.resource_type == BROKER:
                raise KafkaError(ErrorCode.invalid_request, "broker configs are read-only; use the gateway's options")
            if resource.resource_type == TOPIC:
                await _alter_topic(ctx, resource, incremental, validate_only)
            elif resource.resource_type == GROUP:
                await _alter_group(ctx, resource, incremental, validate_only)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported")
        except FAILURES as exc:
            code, message = code_of(exc), str(exc)
        responses.append(dict(error_code=code, error_message=message, resource_type=resource.resource_type,
                              resource_name=resource.resource_name))
    return respond(request, dict(responses=responses))


async def _alter_topic(ctx: RequestContext, resource, incremental: bool, validate_only: bool) -> None:
    ctx.access.require_topic(Operation.ALTER_CONFIGS, resource.resource_name)
    info = ctx.logs.topics().get(resource.resource_name)
    if info is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {resource.resource_name!r}")
    if incremental:
        validate_topic_configs({item.name: None for item in resource.configs})  # known names
        configs = _apply(dict(info.configs), resource.configs, ctx.config)
    else:  # AlterConfigs replaces the whole set
        configs = {item.name: item.value for item in resource.configs if item.value is not None}
    validate_topic_configs(configs)
    if not validate_only:
        await ctx.logs.alter_topic_configs(resource.resource_name, configs)


async def _alter_group(ctx: RequestContext, resource, incremental: bool, validate_only: bool) -> None:
    """A group's configs, whether the group exists or not (as in Kafka); the group's
    coordinator applies them at the members' next heartbeats."""
    group_id = resource.resource_name
    if not ctx.access.allowed_group(Operation.ALTER_CONFIGS, group_id):
        raise KafkaError(ErrorCode.group_authorization_failed, f"ALTER_CONFIGS on group {group_id!r} is not allowed")
    if not group_id:
        raise KafkaError(ErrorCode.invalid_group_id, "group id must not be empty")
    if incremental:
        configs = _apply(dict(ctx.groups.configs.of(group_id)), resource.configs, ctx.config)
    else:
        configs = {item.name: item.value for item in resource.configs if item.value is not None}
    validate_group_configs(configs, ctx.groups.settings)
    if not validate_only:
        await ctx.groups.configs.set(group_id, configs)


def _group_configs(ctx: RequestContext, group_id: str, include_docs: bool) -> list[dict]:
    """Every group config served: the group's own, else the gateway's default."""
    own = ctx.groups.configs.of(group_id)
    entries = []
    for name, spec in sorted(GROUP_CONFIGS.items()):
        option = "group_" + spec.setting
        if name in own:
            value, source = own[name], DYNAMIC_GROUP_CONFIG
        else:
            value, source = str(ctx.config.option(option)), option_source(ctx.config, option)
        entries.append(_entry(name, value, source, False, spec.documentation, include_docs,
                              _STRING if spec.choices else _INT))
    return entries


@register(ApiKey.ALTER_CONFIGS, error=_alter_error)
async def handle_alter_configs(ctx: RequestContext, request: Request):
    return await _alter(ctx, request, incremental=False)


@register(ApiKey.INCREMENTAL_ALTER_CONFIGS, error=_alter_error)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Request):
    return await _alter(ctx, request, incremental=True)
