"""The topic configs that mean something here, with their defaults and validation.

A topic's default comes from the broker config where the gateway has one
(``segment.bytes`` from ``segment_bytes``, ``max.message.bytes`` from
``max_message_bytes``), as Kafka's topic defaults come from its broker settings;
this module is the one place that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafscale.protocol.errors import ErrorCode, KafkaError

from .config import GatewayConfig

__all__ = ["TOPIC_CONFIGS", "TopicConfig", "validate_topic_configs", "effective_configs", "int_config",
           "option_source", "LIST_CONFIGS", "DEFAULT_CONFIG", "STATIC_BROKER_CONFIG", "TOPIC_CONFIG"]

# Kafka's ConfigSource values for where a value comes from
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


def _integer(minimum: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an integer") from None
        if number < minimum:
            raise ValueError(f"{number} is below {minimum}")

    return check


def _cleanup_policy(value: str) -> None:
    if value != "delete":
        raise ValueError("only cleanup.policy=delete is supported (compaction is not)")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    default: str
    check: Callable[[str], None]
    documentation: str
    config_type: int  # Kafka's ConfigType: 3 INT, 5 LONG, 2 STRING, 7 LIST
    broker_option: str | None = None  # the GatewayConfig field that gives the default


TOPIC_CONFIGS: dict[str, TopicConfig] = {
    item.name: item
    for item in (
        TopicConfig("retention.ms", "604800000", _integer(-1),
                    "Delete segments whose newest record is older than this (-1: keep forever).", 5),
        TopicConfig("retention.bytes", "-1", _integer(-1),
                    "Delete the oldest segments while a partition is larger than this (-1: no limit).", 5),
        TopicConfig("segment.bytes", "", _integer(1024),
                    "Largest segment object written for this topic.", 3, "segment_bytes"),
        TopicConfig("max.message.bytes", "", _integer(1),
                    "Largest record batch accepted for this topic.", 3, "max_message_bytes"),
        TopicConfig("cleanup.policy", "delete", _cleanup_policy,
                    "Only 'delete' (retention by time and size) is supported.", 7),
    )
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.invalid_config,
                             f"unsupported topic config {name!r}; supported: {', '.join(sorted(TOPIC_CONFIGS))}")
        if value is None:
            continue
        try:
            spec.check(value)
        except ValueError as exc:
            raise KafkaError(ErrorCode.invalid_config, f"invalid value for {name}: {exc}") from None


LIST_CONFIGS = {name for name, spec in TOPIC_CONFIGS.items() if spec.config_type == 7}
_OPTION_DEFAULTS = {item.name: item.default for item in GatewayConfig.options()}


def option_source(broker: GatewayConfig, option: str) -> int:
    """Where a gateway option's value comes from, as Kafka says it of broker settings:
    STATIC_BROKER_CONFIG when it was set to something else than its default."""
    return DEFAULT_CONFIG if broker.option(option) == _OPTION_DEFAULTS[option] else STATIC_BROKER_CONFIG


def _default(spec: TopicConfig, broker: GatewayConfig) -> tuple[str, int]:
    """The value a topic gets when it does not set ``spec``, and that value's source."""
    if spec.broker_option is None:
        return spec.default, DEFAULT_CONFIG
    return str(broker.option(spec.broker_option)), option_source(broker, spec.broker_option)


def effective_configs(configs: dict[str, str], broker: GatewayConfig) -> dict[str, tuple[str, int]]:
    """Every supported config of a topic: (value, Kafka's config source)."""
    return {name: (configs[name], TOPIC_CONFIG) if name in configs else _default(spec, broker)
            for name, spec in TOPIC_CONFIGS.items()}


def int_config(configs: dict[str, str], name: str, broker: GatewayConfig) -> int:
    if name in configs:
        return int(configs[name])
    return int(_default(TOPIC_CONFIGS[name], broker)[0])
