"""Every topic config Kafka 3.9 accepts: its default, Kafka's validation, what it does here.

A topic's default comes from the broker config where the gateway has one
(``segment.bytes`` from ``segment_bytes``, ``max.message.bytes`` from
``max_message_bytes``, ``cleanup.policy`` from ``log_cleanup_policy``), as Kafka's
topic defaults come from its broker settings; this module is the one place that says so.

Configs about replicas, disks and page-cache flushing are accepted (tools and
topic-creation scripts set them) and validated as Kafka does, and change nothing:
the object store keeps the copies and makes each write durable. ``effect`` says, per
config, what it does on object storage (docs/configuration.md lists them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.record_policy import CODECS

from .config import GatewayConfig

__all__ = ["TOPIC_CONFIGS", "TopicConfig", "TopicPolicy", "validate_topic_configs", "effective_configs",
           "topic_policy", "option_source", "LIST_CONFIGS", "DEFAULT_CONFIG", "STATIC_BROKER_CONFIG",
           "TOPIC_CONFIG", "COMPACT", "DELETE", "LfsPolicy"]

# Kafka's ConfigSource values for where a value comes from
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's ConfigType
_BOOLEAN, _STRING, _INT, _LONG, _DOUBLE, _LIST = 1, 2, 3, 5, 6, 7
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

COMPACT, DELETE = "compact", "delete"


# Java's Integer/Long/Double.parse* of the trimmed value, as Kafka's ConfigDef parses: Python's
# int() and float() also take "1_000" and non-ASCII digits, which Kafka refuses.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _number(minimum: int, maximum: int, *also: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not _INTEGER.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not an integer")
        number = int(value)
        if number in also:
            return
        if not minimum <= number <= maximum:
            raise ValueError(f"{number} is outside [{minimum}, {maximum}]")

    return check


def _int(minimum: int, maximum: int = _INT_MAX) -> Callable[[str], None]:
    return _number(minimum, maximum)


def _long(minimum: int, maximum: int = _LONG_MAX) -> Callable[[str], None]:
    return _number(minimum, maximum)


def _ratio(value: str) -> None:
    if not _DECIMAL.fullmatch(value.strip()):
        raise ValueError(f"{value!r} is not a number")
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{number} is outside [0, 1]")


def _boolean(value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"{value!r} is not true or false")


def _one_of(*choices: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")

    return check


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _cleanup_policy(value: str) -> None:
    unknown = [item for item in _items(value) if item not in (COMPACT, DELETE)]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not a cleanup policy (delete, compact)")


def _throttled_replicas(value: str) -> None:
    """Kafka's form: empty, ``*``, or ``partition:broker`` pairs."""
    if value.strip() in ("", "*"):
        return
    for item in _items(value):
        partition, _, broker = item.partition(":")
        if not (partition.strip().isdigit() and broker.strip().isdigit()):
            raise ValueError(f"{item!r} is not partition:broker")


def _message_format_version(value: str) -> None:
    """Kafka's MetadataVersion names up to 3.x (the config is gone in Kafka 4)."""
    if not re.fullmatch(r"(0\.(8|9|10|11)(\.[0-9])?|[12]\.[0-9]|3\.[0-9])(-IV[0-9])?", value.strip()):
        raise ValueError(f"{value[:40]!r} is not a Kafka message format version (e.g. 2.8, 3.0-IV1)")


def _remote_storage(value: str) -> None:
    _boolean(value)
    if value.strip().lower() == "true":
        raise ValueError("tiered storage is not enabled on this cluster: every topic is already kept in "
                         "object storage, so there is no remote tier to enable")


# What every object store names alike (S3's "safe characters"); "." and ".." are refused as
# segments, since the filesystem store would leave its root for them.
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9!_.*'()-]+")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def _lfs_prefix(value: str) -> None:
    if value == "":
        return
    if len(value) > 512:
        raise ValueError("a key prefix is at most 512 characters")
    for segment in value.split("/"):
        if not _KEY_SEGMENT.fullmatch(segment) or segment in (".", ".."):
            raise ValueError(f"{segment!r} cannot be part of a key prefix: segments are made of letters, digits "
                             "and !_.*'()- (not . or ..), separated by single '/', with none leading or trailing")


def _bucket(value: str) -> None:
    if value and not _BUCKET.fullmatch(value):
        raise ValueError("a bucket name is 3-63 lowercase letters, digits, '.' and '-', "
                         "starting and ending with a letter or digit")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    default: str
    check: Callable[[str], None]
    documentation: str
    config_type: int
    effect: str  # what it does on object storage
    broker_option: str | None = None  # the GatewayConfig field that gives the default


_NO_EFFECT_REPLICAS = "accepted, no effect: the object store keeps the copies"
_NO_EFFECT_DISK = "accepted, no effect: each write is durable in the store before it is acknowledged"

TOPIC_CONFIGS: dict[str, TopicConfig] = {
    item.name: item
    for item in (
        TopicConfig("cleanup.policy", "delete", _cleanup_policy,
                    "delete: retention by time and size; compact: keep each key's newest record; both.", _LIST,
                    "enforced: retention deletes segments, the cleaner compacts keys", "log_cleanup_policy"),
        TopicConfig("compression.type", "producer",
                    _one_of(*CODECS, "producer"),
                    "Codec of stored batches; producer keeps the producer's.", _STRING,
                    "enforced: batches in another codec are recompressed on produce"),
        TopicConfig("compression.gzip.level", "-1", _number(1, 9, -1), "gzip level when compression.type=gzip.", _INT,
                    "enforced when the gateway recompresses"),
        TopicConfig("compression.lz4.level", "9", _int(1, 17), "lz4 level when compression.type=lz4.", _INT,
                    "enforced when the gateway recompresses"),
        TopicConfig("compression.zstd.level", "3", _int(-131072, 22), "zstd level when compression.type=zstd.",
                    _INT, "enforced when the gateway recompresses"),
        TopicConfig("delete.retention.ms", "86400000", _long(0),
                    "How long a tombstone stays after the cleaning pass that first kept it.", _LONG,
                    "enforced by the cleaner"),
        TopicConfig("file.delete.delay.ms", "60000", _long(0), "Delay before a deleted file goes.", _LONG,
                    "accepted, no effect: segment objects are deleted at once"),
        TopicConfig("flush.messages", str(_LONG_MAX), _long(1), "Records between forced disk flushes.", _LONG,
                    _NO_EFFECT_DISK),
        TopicConfig("flush.ms", str(_LONG_MAX), _long(0), "Time between forced disk flushes.", _LONG,
                    _NO_EFFECT_DISK),
        TopicConfig("follower.replication.throttled.replicas", "", _throttled_replicas,
                    "Replicas throttled on the follower side.", _LIST, _NO_EFFECT_REPLICAS),
        TopicConfig("index.interval.bytes", "4096", _int(0), "Bytes between offset index entries.", _INT,
                    "accepted, no effect: index entries are placed every index_interval records"),
        TopicConfig("leader.replication.throttled.replicas", "", _throttled_replicas,
                    "Replicas throttled on the leader side.", _LIST, _NO_EFFECT_REPLICAS),
        TopicConfig("local.retention.bytes", "-2", _long(-2), "Tiered storage: bytes kept on local disk.", _LONG,
                    "accepted, no effect: there is no local tier, all data is in the store"),
        TopicConfig("local.retention.ms", "-2", _long(-2), "Tiered storage: time kept on local disk.", _LONG,
                    "accepted, no effect: there is no local tier, all data is in the store"),
        TopicConfig("max.compaction.lag.ms", str(_LONG_MAX), _long(1),
                    "Longest a record stays ineligible for cleaning.", _LONG,
                    "enforced by the cleaner (from when it first finds the segment not cleaned, checked every cleaner_backoff_ms)"),
        TopicConfig("max.message.bytes", "", _int(0), "Largest record batch accepted for this topic.", _INT,
                    "enforced on produce", "max_message_bytes"),
        TopicConfig("message.downconversion.enable", "true", _boolean,
                    "Whether old fetch versions get down-converted batches.", _BOOLEAN,
                    "accepted, no effect: every served Fetch version reads v2 batches"),
        TopicConfig("message.format.version", "3.0-IV1", _message_format_version, "Deprecated since Kafka 3.0.", _STRING,
                    "accepted, no effect: batches are always v2"),
        TopicConfig("message.timestamp.after.max.ms", str(_LONG_MAX), _long(0),
                    "Most a record's timestamp may be ahead of the broker's clock.", _LONG,
                    "enforced on produce (INVALID_TIMESTAMP)"),
        TopicConfig("message.timestamp.before.max.ms", str(_LONG_MAX), _long(0),
                    "Most a record's timestamp may be behind the broker's clock.", _LONG,
                    "enforced on produce (INVALID_TIMESTAMP)"),
        TopicConfig("message.timestamp.difference.max.ms", str(_LONG_MAX), _long(0),
                    "Deprecated: both bounds at once, when the two above are unset.", _LONG,
                    "enforced on produce when the two above are unset"),
        TopicConfig("message.timestamp.type", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
                    "Whose time a record carries: the producer's, or the broker's at append.", _STRING,
                    "enforced: LogAppendTime stamps each batch when it is appended"),
        TopicConfig("min.cleanable.dirty.ratio", "0.5", _ratio,
                    "Share of the log not yet cleaned that starts a cleaning pass.", _DOUBLE,
                    "enforced by the cleaner"),
        TopicConfig("min.compaction.lag.ms", "0", _long(0), "Least time a record stays uncleaned.", _LONG,
                    "enforced by the cleaner (by the newest timestamp of each segment)"),
        TopicConfig("min.insync.replicas", "1", _int(1), "Replicas that must acknowledge acks=all.", _INT,
                    _NO_EFFECT_REPLICAS),
        TopicConfig("preallocate", "false", _boolean, "Preallocate segment files on disk.", _BOOLEAN,
                    "accepted, no effect: objects are written whole"),
        TopicConfig("remote.log.copy.disable", "false", _boolean, "Tiered storage: stop copying.", _BOOLEAN,
                    "accepted, no effect: there is no separate remote tier"),
        TopicConfig("remote.log.delete.on.disable", "false", _boolean,
                    "Tiered storage: delete remote data when disabled.", _BOOLEAN,
                    "accepted, no effect: there is no separate remote tier"),
        TopicConfig("remote.storage.enable", "false", _remote_storage, "Tiered storage for this topic.", _BOOLEAN,
                    "accepted, no effect: all data is already in object storage"),
        TopicConfig("retention.bytes", "-1", _long(-1 << 63),
                    "Delete the oldest segments while a partition is larger than this (-1: no limit).", _LONG,
                    "enforced under cleanup.policy delete"),
        TopicConfig("retention.ms", "604800000", _long(-1),
                    "Delete segments whose newest record is older than this (-1: keep forever).", _LONG,
                    "enforced under cleanup.policy delete"),
        TopicConfig("segment.bytes", "", _int(14), "Largest segment object written for this topic.", _INT,
                    "enforced by compaction and merging", "segment_bytes"),
        TopicConfig("segment.index.bytes", "10485760", _int(4), "Size of a segment's offset index file.", _INT,
                    "accepted, no effect: index objects are sized by their entries"),
        TopicConfig("segment.jitter.ms", "0", _long(0), "Random jitter subtracted from segment.ms.", _LONG,
                    "accepted, no effect (see segment.ms)"),
        TopicConfig("segment.ms", "604800000", _long(1), "Time after which an open segment is rolled.", _LONG,
                    "accepted, no effect: records leave the open log objects after compaction_delay_ms"),
        TopicConfig("unclean.leader.election.enable", "false", _boolean,
                    "Let an out-of-sync replica become leader.", _BOOLEAN, _NO_EFFECT_REPLICAS),
        # Large File Support (Kafscale's own, not Kafka's): big values go to the store, the log
        # carries a pointer record (docs/lfs.md).
        TopicConfig("kafscale.lfs.enabled", "false", _boolean,
                    "Large File Support: uploads through the gateway's /lfs endpoint, pointers tracked.", _BOOLEAN,
                    "enforced: the /lfs endpoint serves this topic; produced pointers are counted and kept alive"),
        TopicConfig("kafscale.lfs.min_bytes", str(8 << 20), _long(0),
                    "Values at least this large go to the store (the SDK's threshold, require_sdk's limit).", _LONG,
                    "enforced by the SDK and by require_sdk"),
        TopicConfig("kafscale.lfs.bucket", "", _bucket,
                    "Bucket of this topic's LFS objects (default: the store's bucket; S3 stores only).", _STRING,
                    "enforced by the /lfs endpoint"),
        TopicConfig("kafscale.lfs.prefix", "", _lfs_prefix,
                    "Key prefix of this topic's LFS objects (default: the namespace).", _STRING,
                    "enforced by the /lfs endpoint"),
        TopicConfig("kafscale.lfs.require_sdk", "false", _boolean,
                    "Refuse values of min_bytes or more that are not valid pointers to existing objects.", _BOOLEAN,
                    "enforced on produce (POLICY_VIOLATION)"),
    )
}

LIST_CONFIGS = {name for name, spec in TOPIC_CONFIGS.items() if spec.config_type == _LIST}


def _fail(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, message)


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Kafka's checks of a topic's configs: known names, valid values, no conflicts.
    ``None`` values (an IncrementalAlterConfigs DELETE, or names only) are not checked."""
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise _fail(f"unknown topic config {name!r}")
        if value is None:
            continue
        try:
            spec.check(value)
        except ValueError as exc:
            raise _fail(f"invalid value {value!r} for {name}: {exc}") from None
    lags = configs.get("min.compaction.lag.ms"), configs.get("max.compaction.lag.ms")
    if lags[0] is not None and lags[1] is not None and int(lags[0]) > int(lags[1]):
        raise _fail("conflicting topic configs: min.compaction.lag.ms is above max.compaction.lag.ms")


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


def effective_configs(configs: Mapping[str, str], broker: GatewayConfig) -> dict[str, tuple[str, int]]:
    """Every topic config: (value, Kafka's config source)."""
    return {name: (configs[name], TOPIC_CONFIG) if name in configs else _default(spec, broker)
            for name, spec in TOPIC_CONFIGS.items()}


@dataclass(frozen=True, slots=True)
class LfsPolicy:
    """A topic's Large File Support configs, typed."""

    enabled: bool
    min_bytes: int
    bucket: str  # "" = the store's bucket
    prefix: str  # "" = the namespace
    require_sdk: bool


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """A topic's configs that the gateway enforces, typed."""

    compact: bool
    delete: bool
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    max_message_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    log_append_time: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    compression: str  # compression.type
    compression_level: int | None  # the level of ``compression``'s codec, where one is set
    lfs: LfsPolicy

    @property
    def checks_timestamps(self) -> bool:
        return min(self.timestamp_before_max_ms, self.timestamp_after_max_ms) < _LONG_MAX


def topic_policy(configs: Mapping[str, str], broker: GatewayConfig) -> TopicPolicy:
    values = {name: value for name, (value, _) in effective_configs(configs, broker).items()}
    policy = set(_items(values["cleanup.policy"]))
    # Kafka 3.9: the two bounds, unless only the deprecated difference is set.
    difference = int(values["message.timestamp.difference.max.ms"])
    before = int(values["message.timestamp.before.max.ms"])
    after = int(values["message.timestamp.after.max.ms"])
    if "message.timestamp.difference.max.ms" in configs:
        if "message.timestamp.before.max.ms" not in configs:
            before = difference
        if "message.timestamp.after.max.ms" not in configs:
            after = difference
    compression = values["compression.type"]
    level = {"gzip": "compression.gzip.level", "zstd": "compression.zstd.level",
             "lz4": "compression.lz4.level"}.get(compression)
    return TopicPolicy(
        compact=COMPACT in policy, delete=DELETE in policy,
        retention_ms=int(values["retention.ms"]), retention_bytes=int(values["retention.bytes"]),
        segment_bytes=int(values["segment.bytes"]), max_message_bytes=int(values["max.message.bytes"]),
        delete_retention_ms=int(values["delete.retention.ms"]),
        min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
        max_compaction_lag_ms=int(values["max.compaction.lag.ms"]),
        min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
        log_append_time=values["message.timestamp.type"] == "LogAppendTime",
        timestamp_before_max_ms=before, timestamp_after_max_ms=after,
        compression=compression, compression_level=int(values[level]) if level else None,
        lfs=LfsPolicy(enabled=values["kafscale.lfs.enabled"].strip().lower() == "true",
                      min_bytes=int(values["kafscale.lfs.min_bytes"]), bucket=values["kafscale.lfs.bucket"],
                      prefix=values["kafscale.lfs.prefix"],
                      require_sdk=values["kafscale.lfs.require_sdk"].strip().lower() == "true"),
    )
