"""One typed configuration object, built from defaults < TOML file < KAFSCALE_* env < CLI flags."""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

__all__ = ["GatewayConfig", "ConfigError", "load_config", "build_parser"]


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


def _opt(default: Any, help: str, *, minimum: int | None = None, choices: tuple | None = None):
    return field(default=default, metadata={"help": help, "minimum": minimum, "choices": choices})


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    # Network
    host: str = _opt("127.0.0.1", "address to listen on for Kafka clients")
    port: int = _opt(9092, "Kafka listener port", minimum=0)
    advertised_host: str = _opt("", "host clients are told to connect to (default: --host)")
    advertised_port: int = _opt(0, "port clients are told to connect to (default: --port)", minimum=0)
    http_host: str = _opt("127.0.0.1", "address of the /metrics, /healthz, /readyz listener")
    http_port: int = _opt(9094, "port of the HTTP listener (0 picks a free one, -1 disables it)", minimum=-1)
    node_id: int = _opt(0, "broker id this gateway reports in Metadata", minimum=0)
    cluster_id: str = _opt("kafscale", "cluster id reported in Metadata")

    # Storage
    storage: str = _opt("./data", "where topics live: a directory, file:///path, s3://bucket/prefix or memory://")
    namespace: str = _opt("kafscale", "first component of every object key")
    fsync: bool = _opt(True, "fsync segment files before acknowledging (filesystem backend)")
    s3_endpoint: str = _opt("", "S3 endpoint URL for S3-compatible servers (MinIO...); empty: AWS")
    s3_region: str = _opt("", "S3 region (default: AWS_REGION from the environment)")
    s3_access_key_id: str = _opt("", "S3 access key (default: AWS_ACCESS_KEY_ID from the environment)")
    s3_secret_access_key: str = _opt("", "S3 secret key (default: AWS_SECRET_ACCESS_KEY from the environment)")
    s3_path_style: bool = _opt(False, "path-style S3 requests (MinIO and most self-hosted servers)")
    s3_allow_http: bool = _opt(False, "allow plain-HTTP S3 endpoints")
    s3_timeout_ms: int = _opt(30_000, "timeout of one S3 request", minimum=100)
    s3_retries: int = _opt(5, "retries of a failed S3 request, with exponential backoff", minimum=0)

    # Cluster (several gateways sharing one store; see docs/operations.md)
    etcd_endpoints: str = _opt("", "comma-separated etcd client URLs; empty: embedded metadata, one gateway")
    etcd_prefix: str = _opt("/kafscale", "etcd key prefix; the cluster id is appended")
    etcd_timeout_ms: int = _opt(5000, "timeout of one etcd request", minimum=100)
    lease_ttl_ms: int = _opt(6000, "a gateway's lease: its partitions move this long after it stops", minimum=2000)
    cluster_refresh_ms: int = _opt(500, "how often a gateway re-checks what it should own (changes in etcd also trigger it at once)", minimum=50)
    coordinator_slots: int = _opt(16, "group-coordinator slots spread over the gateways (fixed per cluster)", minimum=1)

    # Produce path
    linger_ms: int = _opt(
        -1, "extra wait before writing a log object (-1: 0 on the filesystem, 200 on S3); requests "
        "arriving while one is written always share the next", minimum=-1)
    flush_bytes: int = _opt(
        -1, "write a log object as soon as this many bytes wait (-1: 4 MiB on the filesystem, 8 MiB on S3)",
        minimum=-1)
    segment_bytes: int = _opt(64 * 2**20, "largest segment object compaction writes", minimum=1024)
    compaction_delay_ms: int = _opt(
        60_000, "longest a partition's records stay in shared log objects before compaction into a "
        "segment (sooner once segment_bytes wait)", minimum=0)
    compaction_time_percent: int = _opt(
        50, "most of the gateway's time compaction may take: after each segment it pauses so that its "
        "work is at most this share (1-100)", minimum=1)
    index_interval: int = _opt(1000, "records between sparse index entries", minimum=1)
    producer_scan_bytes: int = _opt(
        8 * 2**20, "newest segment bytes read when a partition loads, to rebuild idempotent-producer state", minimum=0)
    max_message_bytes: int = _opt(1048588, "largest record batch accepted (Kafka's message.max.bytes)", minimum=1)

    # Topics
    retention_check_interval_ms: int = _opt(300_000, "how often retention deletes old segments", minimum=10)
    auto_create_topics: bool = _opt(True, "create unknown topics on Metadata and Produce, as Kafka does")
    default_partitions: int = _opt(1, "partitions of an auto-created topic", minimum=1)
    max_partitions_per_topic: int = _opt(
        10_000, "most partitions one topic may have (more: INVALID_PARTITIONS)", minimum=1)
    max_partitions: int = _opt(
        100_000, "most partitions over all topics, the catalog every gateway serves (more: POLICY_VIOLATION)",
        minimum=1)

    # Consumer groups (Kafka's group.* broker settings)
    group_min_session_timeout_ms: int = _opt(6000, "shortest session timeout a member may ask for", minimum=1)
    group_max_session_timeout_ms: int = _opt(1_800_000, "longest session timeout a member may ask for", minimum=1)
    group_initial_rebalance_delay_ms: int = _opt(
        3000, "how long a new group waits for more members before its first rebalance", minimum=0)

    # Limits
    max_frame_bytes: int = _opt(100 * 2**20, "largest request frame; bigger ones close the connection", minimum=64)
    max_inflight_bytes: int = _opt(
        256 * 2**20, "request and unsent response bytes held across all connections", minimum=1024)
    connection_inflight_bytes: int = _opt(
        64 * 2**20, "request and unsent response bytes one connection may hold (beyond one request)",
        minimum=1024)
    max_inflight_requests: int = _opt(
        1024, "pipelined requests in flight per connection (produce requests wait up to linger_ms for their "
        "log object, so a client sending every few ms needs hundreds; their bytes are bounded by the budgets)",
        minimum=1)
    fetch_max_bytes: int = _opt(
        55 * 2**20, "largest Fetch answer, whatever the client asks (Kafka's fetch.max.bytes); "
        "the first batch is served even if larger", minimum=1024)
    connections_max_idle_ms: int = _opt(
        600_000, "close a connection with no request in flight after this long without one", minimum=1)
    connection_stall_ms: int = _opt(
        30_000, "close a connection that stops sending a started request or stops reading its answers "
        "for this long", minimum=1)
    request_timeout_ms: int = _opt(30_000, "longest a request may take before REQUEST_TIMED_OUT", minimum=1)
    storage_threads: int = _opt(8, "worker threads doing object-store calls", minimum=1)
    cache_bytes: int = _opt(256 * 2**20, "bytes of recent segments kept in memory for fetches", minimum=0)
    shutdown_timeout_ms: int = _opt(10_000, "grace period to flush on SIGTERM/SIGINT", minimum=0)

    # Logs
    log_level: str = _opt("INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    log_format: str = _opt("text", "log line format", choices=("text", "json"))

    @property
    def on_s3(self) -> bool:
        return self.storage.startswith("s3://")

    @property
    def flush_linger_ms(self) -> int:
        """linger_ms, or the backend's default: an S3 PUT costs money, a file write does not."""
        return self.linger_ms if self.linger_ms >= 0 else (200 if self.on_s3 else 0)

    @property
    def flush_max_bytes(self) -> int:
        return self.flush_bytes if self.flush_bytes > 0 else (8 if self.on_s3 else 4) * 2**20

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertised_host or self.host, self.advertised_port or self.port)

    def validate(self) -> GatewayConfig:
        for item in fields(self):
            value = getattr(self, item.name)
            minimum = item.metadata.get("minimum")
            if minimum is not None and value < minimum:
                raise ConfigError(f"{item.name} must be >= {minimum}, got {value}")
            choices = item.metadata.get("choices")
            if choices and value not in choices:
                raise ConfigError(f"{item.name} must be one of {', '.join(choices)}, got {value!r}")
        if self.compaction_time_percent > 100:
            raise ConfigError(f"compaction_time_percent must be <= 100, got {self.compaction_time_percent}")
        if self.segment_bytes < self.max_message_bytes:
            raise ConfigError("segment_bytes must be at least max_message_bytes")
        if self.etcd_endpoints and self.cluster_refresh_ms * 3 > self.lease_ttl_ms:
            raise ConfigError("cluster_refresh_ms must be at most a third of lease_ttl_ms")
        if not self.namespace or "/" in self.namespace:
            raise ConfigError("namespace must be a non-empty name without '/'")
        return self


def _parse_value(name: str, kind: type, raw: Any, source: str) -> Any:
    if isinstance(raw, kind) and not (kind is int and isinstance(raw, bool)):
        return raw
    if isinstance(raw, str):
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
        elif kind is int:
            try:
                return int(raw.replace("_", ""))
            except ValueError:
                pass
        elif kind is str:
            return raw
    raise ConfigError(f"{name} from {source}: expected {kind.__name__}, got {raw!r}")


_TYPES = {"int": int, "bool": bool, "str": str}


def _field_type(item) -> type:
    return _TYPES[item.type] if isinstance(item.type, str) else item.type


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafscale-gateway",
        description="A Kafka-compatible gateway that keeps topics in object storage. "
        "Every option can also be set as KAFSCALE_<OPTION> in the environment or in a TOML "
        "file (--config); flags win over the environment, which wins over the file.",
    )
    parser.add_argument("--config", metavar="FILE", help="TOML file with option = value lines")
    for item in fields(GatewayConfig):
        flag = "--" + item.name.replace("_", "-")
        kind = _field_type(item)
        default = item.default if item.default is not MISSING else None
        env = "KAFSCALE_" + item.name.upper()
        text = f"{item.metadata['help']} (default: {default!r}; env {env})"
        if kind is bool:
            parser.add_argument(flag, dest=item.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=item.name, default=None, metavar=kind.__name__.upper(), help=text)
    return parser


def load_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    known = {item.name: item for item in fields(GatewayConfig)}
    config_file = args.config or environ.get("KAFSCALE_CONFIG")
    if config_file:
        try:
            with open(config_file, "rb") as handle:
                document = tomllib.load(handle)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from exc
        for key, raw in document.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ConfigError(f"unknown option {key!r} in {config_file}")
            values[name] = _parse_value(name, _field_type(known[name]), raw, config_file)
    for name, item in known.items():
        env = "KAFSCALE_" + name.upper()
        if env in environ:
            values[name] = _parse_value(name, _field_type(item), environ[env], env)
    for name, item in known.items():
        raw = getattr(args, name)
        if raw is not None:
            values[name] = _parse_value(name, _field_type(item), raw, "--" + name.replace("_", "-"))
    return replace(GatewayConfig(), **values).validate()
