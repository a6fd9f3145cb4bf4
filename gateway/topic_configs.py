"""The topic configs that mean something here, with their defaults and validation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kafscale.protocol.errors import ErrorCode, KafkaError

__all__ = ["TOPIC_CONFIGS", "TopicConfig", "validate_topic_configs", "effective_configs"]


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


TOPIC_CONFIGS: dict[str, TopicConfig] = {
    item.name: item
    for item in (
        TopicConfig("retention.ms", "604800000", _integer(-1),
                    "Delete segments whose newest record is older than this (-1: keep forever).", 5),
        TopicConfig("retention.bytes", "-1", _integer(-1),
                    "Delete the oldest segments while a partition is larger than this (-1: no limit).", 5),
        TopicConfig("segment.bytes", str(64 * 2**20), _integer(1024),
                    "Largest segment object written for this topic.", 3),
        TopicConfig("max.message.bytes", "1048588", _integer(1),
                    "Largest record batch accepted for this topic.", 3),
        TopicConfig("cleanup.policy", "delete", _cleanup_policy,
                    "Only 'delete' (retention by time and size) is supported.", 7),
    )
}


def validate_topic_configs(configs: dict[str, str | None]) -> None:
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


def effective_configs(configs: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """Every supported config: (value, set explicitly on the topic)."""
    return {name: (configs.get(name, spec.default), name in configs) for name, spec in TOPIC_CONFIGS.items()}


def int_config(configs: dict[str, str], name: str) -> int:
    return int(configs.get(name, TOPIC_CONFIGS[name].default))
