"""One typed configuration object, built from defaults < TOML file < KAFSCALE_* env < CLI flags."""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, Literal

from kafscale import __version__
from kafscale.storage_backends import S3Options, check_location

__all__ = ["GatewayConfig", "ConfigError", "Listener", "ResolvedLog", "LoadedConfig", "load_config", "resolve_config",
           "build_parser", "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "SECTIONS", "NetworkConfig", "TlsConfig", "SaslConfig", "AclConfig", "StorageConfig",
           "ClusterConfig", "LogConfig", "TopicsConfig", "GroupsConfig", "LfsConfig", "LimitsConfig", "LoggingConfig"]


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


def _opt(default: Any, help: str, *, minimum: int | None = None, maximum: int | None = None,
         choices: tuple | None = None, secret: bool = False):
    return field(default=default, metadata={"help": help, "minimum": minimum, "maximum": maximum,
                                            "choices": choices, "secret": secret})


_PORT_MAX = 65535
_NODE_ID_MAX = 2**31 - 1


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class Listener:
    """One Kafka listener: where it binds and what a client must do on it."""

    name: str
    protocol: str  # one of SECURITY_PROTOCOLS
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _endpoints(text: str, option: str) -> list[tuple[str, str, int]]:
    found = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not name or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"{option}: {item!r} is not NAME://host:port")
        found.append((name.upper(), host.strip("[]"), int(port)))
    if len({name for name, _, _ in found}) != len(found):
        raise ConfigError(f"{option}: a listener name appears twice")
    return found


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Where the gateway listens and what it tells clients."""

    host: str = _opt("127.0.0.1", "address to listen on for Kafka clients")
    port: int = _opt(9092, "Kafka listener port", minimum=0, maximum=_PORT_MAX)
    advertised_host: str = _opt("", "host clients are told to connect to (default: --host)")
    advertised_port: int = _opt(0, "port clients are told to connect to (default: --port)", minimum=0,
                                maximum=_PORT_MAX)
    http_host: str = _opt("127.0.0.1", "address of the /metrics, /healthz, /readyz listener")
    http_port: int = _opt(9094, "port of the HTTP listener (0 picks a free one, -1 disables it)", minimum=-1,
                          maximum=_PORT_MAX)
    http_idle_timeout_ms: int = _opt(60_000, "an HTTP client that sends no body bytes, or reads none of the answer, "
                                     "this long is dropped", minimum=100)
    listeners: str = _opt(
        "", "Kafka listeners, NAME://host:port comma-separated (NAME a security protocol: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL, or mapped to one by listener_security_protocol_map); empty: "
        "PLAINTEXT://host:port; the first one is the one host/port/advertised_* describe")
    advertised_listeners: str = _opt(
        "", "addresses clients are told for each listener, NAME://host:port; a listener not named here "
        "is advertised at advertised_host (or its own host) and its port")
    listener_security_protocol_map: str = _opt(
        "", "NAME:PROTOCOL pairs for listener names that are not protocol names (INTERNAL:SASL_SSL,...)")
    node_id: str = _opt("auto", "broker id this gateway reports in Metadata: a number, or auto (alone: 0; in a "
                        "cluster the lowest id no live gateway holds, held under its etcd lease)")
    cluster_id: str = _opt("kafscale", "cluster id reported in Metadata")
    workers: str = _opt("1", "gateway processes on this machine behind one listener (SO_REUSEPORT), each a broker "
                        "of its own port: a number, or auto (one per core); alone, they coordinate through "
                        "their parent, which keeps its state in the storage directory (docs/operations.md)")
    worker_ports: int = _opt(0, "with workers: the first of the ports the workers' own listeners take, one per "
                             "worker and listener (0: ports the system picks)", minimum=0, maximum=_PORT_MAX)
    worker_slot: int = _opt(-1, "set by the parent of --workers for each worker process: its place among them "
                            "(-1: not a worker)", minimum=-1, maximum=1023)
    worker_parent: int = _opt(0, "set by the parent of --workers for each worker process: the parent's pid; "
                              "a worker exits when the parent is gone", minimum=0)
    worker_sockets: str = _opt("", "set by the parent of --workers for each worker process: the private directory "
                               "of the workers' sockets, where each offers its own metrics to the others")

    @property
    def worker_count(self) -> int:
        """How many processes ``workers`` asks for (auto: the cores this process may run on)."""
        text = str(self.workers).strip()
        if text == "auto":
            return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if not text.isdigit() or not 1 <= int(text) <= 1024:
            raise ConfigError(f"workers must be auto or a number from 1 to 1024, got {self.workers!r}")
        return int(text)

    @property
    def is_worker(self) -> bool:
        """Whether this process is one of a parent's workers, sharing its listeners' ports."""
        return self.worker_slot >= 0

    @property
    def requested_node_id(self) -> int | Literal["auto"]:
        text = str(self.node_id).strip()
        if text == "auto":
            return "auto"
        if not text.isdigit() or int(text) > _NODE_ID_MAX:
            raise ConfigError(f"node_id must be auto or a number from 0 to {_NODE_ID_MAX}, got {self.node_id!r}")
        return int(text)

    @property
    def advertised(self) -> tuple[str, int]:
        """Where clients are sent for the first listener."""
        first = self.kafka_listeners[0]
        return (self.advertised_host or first.host, self.advertised_port or first.port)

    @property
    def kafka_listeners(self) -> tuple[Listener, ...]:
        if not self.listeners:
            return (Listener("PLAINTEXT", "PLAINTEXT", self.host, self.port),)
        mapping = self.protocol_map()
        listeners = []
        for name, host, port in _endpoints(self.listeners, "listeners"):
            protocol = mapping.get(name, name)
            if protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(f"listeners: {name} is neither a security protocol nor in "
                                  "listener_security_protocol_map")
            listeners.append(Listener(name, protocol, host, port))
        if not listeners:
            raise ConfigError("listeners: no listener given")
        return tuple(listeners)

    def protocol_map(self) -> dict[str, str]:
        mapping = {}
        for pair in filter(None, (p.strip() for p in self.listener_security_protocol_map.split(","))):
            name, sep, protocol = pair.partition(":")
            if not sep or protocol.upper() not in SECURITY_PROTOCOLS:
                raise ConfigError(f"listener_security_protocol_map: {pair!r} is not NAME:PROTOCOL "
                                  f"(PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)})")
            mapping[name.strip().upper()] = protocol.upper()
        return mapping

    @property
    def advertised_endpoints(self) -> dict[str, tuple[str, int]]:
        """Listener name -> advertised (host, port) named by advertised_listeners."""
        return {name: (host, port) for name, host, port in _endpoints(self.advertised_listeners,
                                                                        "advertised_listeners")}


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS for SSL and SASL_SSL listeners and the HTTP endpoint (docs/operations.md, "Security")."""

    ssl_certfile: str = _opt("", "PEM file with the gateway's certificate chain")
    ssl_keyfile: str = _opt("", "PEM file with the certificate's private key (default: in ssl_certfile)")
    ssl_key_password: str = _opt("", "password of an encrypted ssl_keyfile", secret=True)
    ssl_cafile: str = _opt("", "PEM file of the CAs client certificates must chain to (mTLS)")
    ssl_client_auth: str = _opt("none", "client certificates: none, requested (verified if sent) or required",
                                choices=("none", "requested", "required"))
    ssl_principal_mapping_rules: str = _opt(
        "DEFAULT", "how a client certificate's subject becomes a principal: Kafka's "
        "ssl.principal.mapping.rules (RULE:pattern/replacement/[LU], ..., DEFAULT: the whole DN)")
    http_ssl: bool = _opt(False, "serve the HTTP endpoint over TLS with ssl_certfile")


@dataclass(frozen=True, slots=True)
class SaslConfig:
    """SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners."""

    sasl_enabled_mechanisms: str = _opt("SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
                                        "SASL mechanisms offered: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
    sasl_plain_users_file: str = _opt(
        "", "file of user=password lines PLAIN checks first (PLAIN also accepts SCRAM users' passwords)")
    sasl_bootstrap_user: str = _opt(
        "", "user given SCRAM-SHA-256 and -512 credentials at start when it has none (the first admin)")
    sasl_bootstrap_password: str = _opt("", "that user's password (set it through the environment)", secret=True)
    connections_max_reauth_ms: int = _opt(
        0, "longest a SASL session lasts before the client must re-authenticate (KIP-368); 0: forever",
        minimum=0)
    auth_failure_delay_ms: int = _opt(
        100, "delay before answering a failed authentication and closing the connection", minimum=0)

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return tuple(m.strip().upper() for m in self.sasl_enabled_mechanisms.split(",") if m.strip())


@dataclass(frozen=True, slots=True)
class AclConfig:
    """Authorization: Kafka ACLs, or none."""

    authorizer: str = _opt("none", "none: every client may do anything; acl: Kafka ACLs decide",
                           choices=("none", "acl"))
    super_users: str = _opt("", "principals allowed everything, semicolon-separated (User:admin;User:ops)")
    allow_everyone_if_no_acl_found: bool = _opt(
        False, "allow a request on a resource no ACL names (Kafka's setting of the same name)")

    @property
    def super_user_set(self) -> frozenset[str]:
        return frozenset(u.strip() for u in self.super_users.split(";") if u.strip())


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """Where topics live: the object store and its S3 settings."""

    storage: str = _opt("./data", "where topics live: a directory, file:///path, s3://bucket/prefix or memory://")
    namespace: str = _opt("kafscale", "first component of every object key")
    fsync: bool = _opt(True, "fsync segment files before acknowledging (filesystem backend)")
    s3_endpoint: str = _opt("", "S3 endpoint URL for S3-compatible servers (MinIO...); empty: AWS")
    s3_region: str = _opt("", "S3 region (default: AWS_REGION from the environment)")
    s3_access_key_id: str = _opt("", "S3 access key (default: AWS_ACCESS_KEY_ID from the environment)")
    s3_secret_access_key: str = _opt("", "S3 secret key (default: AWS_SECRET_ACCESS_KEY from the environment)",
                                     secret=True)
    s3_path_style: bool = _opt(False, "path-style S3 requests (MinIO and most self-hosted servers)")
    s3_allow_http: bool = _opt(False, "allow plain-HTTP S3 endpoints")
    s3_timeout_ms: int = _opt(30_000, "timeout of one S3 request", minimum=100)
    s3_retries: int = _opt(5, "retries of a failed S3 request, with exponential backoff", minimum=0)

    @property
    def s3_options(self) -> S3Options:
        """The S3 settings as the storage adapters take them (Spark's reader builds the same type
        from its options)."""
        return S3Options(endpoint=self.s3_endpoint or None, region=self.s3_region or None,
                         access_key_id=self.s3_access_key_id or None,
                         secret_access_key=self.s3_secret_access_key or None, path_style=self.s3_path_style,
                         allow_http=self.s3_allow_http, timeout_ms=self.s3_timeout_ms, retries=self.s3_retries)

    @property
    def on_s3(self) -> bool:
        return self.storage.startswith("s3://")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Several gateways sharing one store, through etcd (docs/cluster.md)."""

    etcd_endpoints: str = _opt("", "comma-separated etcd client URLs; empty: embedded metadata, one gateway")
    etcd_prefix: str = _opt("/kafscale", "etcd key prefix; the cluster id is appended")
    etcd_timeout_ms: int = _opt(5000, "timeout of one etcd request", minimum=100)
    etcd_cafile: str = _opt("", "PEM file of the CAs https etcd endpoints must chain to (default: the system's)")
    etcd_certfile: str = _opt("", "PEM client certificate for etcd's --client-cert-auth")
    etcd_keyfile: str = _opt("", "PEM private key of etcd_certfile (default: in etcd_certfile)")
    etcd_username: str = _opt("", "etcd user the gateways log in as when etcd's auth is enabled")
    etcd_password: str = _opt("", "that user's password (set it through the environment)", secret=True)
    lease_ttl_ms: int = _opt(6000, "a gateway's lease: its partitions move this long after it stops", minimum=2000)
    cluster_refresh_ms: int = _opt(500, "how often a gateway re-checks what it should own (changes in etcd also trigger it at once)", minimum=50)
    coordinator_slots: int = _opt(16, "group-coordinator slots spread over the gateways (fixed per cluster)", minimum=1)
    drain_timeout_ms: int = _opt(30_000, "at SIGTERM a cluster gateway hands its partitions and group slots over "
                                 "for at most this long before it closes its connections", minimum=0)

    @property
    def enabled(self) -> bool:
        """Whether the gateway runs in a cluster (etcd endpoints given), not alone."""
        return bool(self.etcd_endpoints)


@dataclass(frozen=True, slots=True)
class ResolvedLog:
    """:class:`LogConfig`'s backend-dependent options as they apply (``GatewayConfig.resolved_log``)."""

    linger_ms: int
    flush_bytes: int
    compaction_delay_ms: int
    compaction_min_bytes: int


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The shared log: writing log objects, compaction into segments, indexes."""

    linger_ms: int = _opt(
        -1, "extra wait before writing a log object (-1: 0 on the filesystem, 250 on S3); requests "
        "arriving while one is written always share the next", minimum=-1)
    flush_bytes: int = _opt(
        -1, "write a log object as soon as this many bytes wait (-1: 4 MiB on the filesystem, 16 MiB on S3)",
        minimum=-1)
    fill_wait_ms: int = _opt(
        5, "with no linger: under load (bytes arriving fast enough to add 256 KiB in this time), the longest "
        "a log object waits to fill toward flush_bytes; fewer, larger objects cost less CPU (0: never)", minimum=0)
    segment_bytes: int = _opt(64 * 2**20, "largest segment object compaction writes", minimum=1024)
    compaction_delay_ms: int = _opt(
        -1, "longest a partition's records stay in shared log objects before compaction into a segment "
        "(-1: 60 s on the filesystem, 10 min on S3, where each segment is a billed PUT)", minimum=-1)
    compaction_min_bytes: int = _opt(
        -1, "compact a partition sooner, once this many of its bytes wait in log objects (-1: 4 MiB on the "
        "filesystem, 64 MiB on S3, where each segment is a billed PUT): segments are written per partition, so "
        "quiet partitions wait for compaction_delay_ms instead", minimum=-1)
    compaction_time_percent: int = _opt(
        50, "most of the gateway's time compaction may take: after each segment it pauses so that its "
        "work is at most this share (1-100)", minimum=1)
    index_interval: int = _opt(1000, "records between sparse index entries", minimum=1)
    cleaner_dedupe_buffer_bytes: int = _opt(
        128 * 2**20, "memory of the cleaner's key map (Kafka's log.cleaner.dedupe.buffer.size): a pass covers "
        "as many dirty segments as have keys that fit, the rest waits for the next pass", minimum=64 * 2**10)
    cleaner_backoff_ms: int = _opt(
        15_000, "how often the cleaner looks for compacted partitions to clean (Kafka's log.cleaner.backoff.ms)",
        minimum=10)
    producer_scan_bytes: int = _opt(
        8 * 2**20, "newest segment bytes read when a partition loads, to rebuild idempotent-producer state", minimum=0)
    max_message_bytes: int = _opt(1048588, "largest record batch accepted (Kafka's message.max.bytes)", minimum=1)


@dataclass(frozen=True, slots=True)
class TopicsConfig:
    """Topics: creation, limits on their number, retention checks."""

    retention_check_interval_ms: int = _opt(300_000, "how often retention deletes old segments", minimum=10)
    log_cleanup_policy: str = _opt(
        "delete", "cleanup.policy of topics that do not set one (Kafka's log.cleanup.policy)",
        choices=("delete", "compact", "compact,delete", "delete,compact"))
    auto_create_topics: bool = _opt(True, "create unknown topics on Metadata and Produce, as Kafka does")
    default_partitions: int = _opt(1, "partitions of an auto-created topic", minimum=1)
    max_partitions_per_topic: int = _opt(
        10_000, "most partitions one topic may have (more: INVALID_PARTITIONS)", minimum=1)
    max_partitions: int = _opt(
        100_000, "most partitions over all topics, the catalog every gateway serves (more: POLICY_VIOLATION)",
        minimum=1)


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    """Consumer groups and transactions (Kafka's group.* and transaction.* broker settings)."""

    group_min_session_timeout_ms: int = _opt(6000, "shortest session timeout a member may ask for", minimum=1)
    group_max_session_timeout_ms: int = _opt(1_800_000, "longest session timeout a member may ask for", minimum=1)
    group_initial_rebalance_delay_ms: int = _opt(
        3000, "how long a new group waits for more members before its first rebalance", minimum=0)
    group_consumer_session_timeout_ms: int = _opt(
        45_000, "consumer-protocol groups (KIP-848): a member silent this long is removed (Kafka's "
        "group.consumer.session.timeout.ms; a group's consumer.session.timeout.ms overrides it)", minimum=1)
    group_consumer_heartbeat_interval_ms: int = _opt(
        5000, "consumer-protocol groups: how often members heartbeat, and so how soon they learn of a new "
        "assignment (Kafka's group.consumer.heartbeat.interval.ms; a group's consumer.heartbeat.interval.ms overrides "
        "it)", minimum=1)
    group_consumer_max_size: int = _opt(
        2**31 - 1, "most members of one consumer-protocol group (more: GROUP_MAX_SIZE_REACHED)", minimum=1)
    group_share_session_timeout_ms: int = _opt(
        45_000, "share groups (KIP-932): a member silent this long is removed and its acquired records given back "
        "(Kafka's group.share.session.timeout.ms; a group's share.session.timeout.ms overrides it)", minimum=1)
    group_share_heartbeat_interval_ms: int = _opt(
        5000, "share groups: how often members heartbeat (Kafka's group.share.heartbeat.interval.ms; a group's "
        "share.heartbeat.interval.ms overrides it)", minimum=1)
    group_share_record_lock_duration_ms: int = _opt(
        30_000, "share groups: how long a member holds a record it fetched before it is given back (Kafka's "
        "group.share.record.lock.duration.ms; a group's share.record.lock.duration.ms overrides it)",
        minimum=1000, maximum=3_600_000)
    group_share_delivery_count_limit: int = _opt(
        5, "share groups: deliveries of one record before it is archived, never delivered again (Kafka's "
        "group.share.delivery.count.limit; a group's share.delivery.count.limit overrides it)", minimum=2, maximum=10)
    group_share_partition_max_record_locks: int = _opt(
        2000, "share groups: most records in flight per share-partition (acquired, or past an unacknowledged one); "
        "it bounds the state kept and written per partition", minimum=100, maximum=10_000)
    group_share_max_size: int = _opt(200, "most members of one share group (more: GROUP_MAX_SIZE_REACHED)", minimum=1)
    group_share_auto_offset_reset: str = _opt(
        "latest", "where a share group starts reading a partition it has no state for (a group's "
        "share.auto.offset.reset overrides it)", choices=("latest", "earliest"))
    group_share_isolation_level: str = _opt(
        "read_uncommitted", "whether share groups deliver records of open and aborted transactions (a group's "
        "share.isolation.level overrides it)", choices=("read_uncommitted", "read_committed"))
    transaction_version: int = _opt(
        2, "the transaction.version feature level finalized in ApiVersions: 2 has Kafka 4 clients use "
        "transactions v2 (KIP-890 part 2: partitions added by Produce, the epoch bumped per transaction), 1 "
        "keeps them on v1; requests of either version are served whatever it says", minimum=1, maximum=2)
    transaction_max_timeout_ms: int = _opt(
        900_000, "longest transaction.timeout.ms a transactional producer may ask for (Kafka's "
        "transaction.max.timeout.ms)", minimum=1)
    offsets_topic_num_partitions: int = _opt(
        50, "partitions of __consumer_offsets, the internal topic lag tools read every group's commits from "
        "(Kafka's offsets.topic.num.partitions; fixed once created)", minimum=1)
    transactional_id_expiration_ms: int = _opt(
        7 * 24 * 3600 * 1000, "a transactional id with no transaction in flight, unused this long, is deleted "
        "(Kafka's transactional.id.expiration.ms); each id keeps one small document in the store (etcd in a "
        "cluster) until then", minimum=1)
    transaction_check_interval_ms: int = _opt(
        1000, "how often transactions past their timeout are aborted, and (in a cluster) this gateway's "
        "markers of transactions other gateways prepared are written", minimum=10)


@dataclass(frozen=True, slots=True)
class LfsConfig:
    """Large File Support: the /lfs upload endpoint and the clean-up of its objects (docs/lfs.md)."""

    lfs_part_bytes: int = _opt(64 * 2**20, "part size of multipart uploads on S3 (one pre-signed URL per part); "
                               "objects up to this size get one pre-signed PUT", minimum=5 * 2**20)
    lfs_max_object_bytes: int = _opt(5 * 2**40, "largest object an upload session may announce", minimum=1)
    lfs_upload_expiry_ms: int = _opt(3_600_000, "how long an upload session (and its pre-signed URLs) lasts",
                                     minimum=1000)
    lfs_orphan_ms: int = _opt(86_400_000, "an uploaded object no pointer record named within this time is "
                              "deleted", minimum=1000)
    lfs_sweep_interval_ms: int = _opt(300_000, "how often orphaned and expired LFS objects are looked for",
                                      minimum=100)
    lfs_min_upload_bytes_per_s: int = _opt(
        1024, "slowest upload accepted through the gateway: one sending less in a 10 s window is ended (408); "
        "the whole body must also arrive before its session expires", minimum=0)
    lfs_max_uploads_per_principal: int = _opt(
        16, "uploads one principal may send through the gateway at once; more are answered 429", minimum=1)


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """Bounds on memory, frames, connections, time and threads."""

    max_frame_bytes: int = _opt(100 * 2**20, "largest request frame; bigger ones close the connection", minimum=64)
    max_inflight_bytes: int = _opt(
        256 * 2**20, "request and unsent response bytes held across all connections", minimum=1024)
    connection_inflight_bytes: int = _opt(
        64 * 2**20, "request and unsent response bytes one connection may hold (beyond one request)",
        minimum=1024)
    sasl_max_receive_bytes: int = _opt(
        512 * 2**10, "largest request frame before a SASL listener's client has authenticated; bigger ones "
        "close the connection (Kafka's sasl.server.max.receive.size)", minimum=64)
    unauthenticated_inflight_bytes: int = _opt(
        16 * 2**20, "request and unsent response bytes held across all connections not yet authenticated: "
        "a pool of their own, so they cannot take the memory of authenticated clients", minimum=1024)
    max_inflight_requests: int = _opt(
        1024, "pipelined requests in flight per connection (produce requests wait up to linger_ms for their "
        "log object, so a client sending every few ms needs hundreds; their bytes are bounded by the budgets)",
        minimum=1)
    fetch_max_bytes: int = _opt(
        55 * 2**20, "largest Fetch answer, whatever the client asks (Kafka's fetch.max.bytes); "
        "the first batch is served even if larger", minimum=1024)
    fetch_session_cache_slots: int = _opt(
        1000, "incremental fetch sessions (KIP-227) kept at once, over all clients (Kafka's "
        "max.incremental.fetch.session.cache.slots); 0 serves none", minimum=0)
    connections_max_idle_ms: int = _opt(
        600_000, "close a connection with no request in flight after this long without one", minimum=1)
    connection_stall_ms: int = _opt(
        30_000, "close a connection that stops sending a started request or stops reading its answers "
        "for this long", minimum=1)
    request_timeout_ms: int = _opt(30_000, "longest a request may take before REQUEST_TIMED_OUT", minimum=1)
    storage_threads: int = _opt(8, "worker threads doing object-store calls (memory:// needs none)", minimum=1)
    cache_bytes: int = _opt(256 * 2**20, "bytes of recent segments kept in memory for fetches", minimum=0)
    shutdown_timeout_ms: int = _opt(10_000, "grace period to flush on SIGTERM/SIGINT", minimum=0)


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """The gateway's own log lines."""

    log_level: str = _opt("INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    log_format: str = _opt("text", "log line format", choices=("text", "json"))


SECTIONS: dict[str, type] = {
    "network": NetworkConfig,
    "tls": TlsConfig,
    "sasl": SaslConfig,
    "acl": AclConfig,
    "storage": StorageConfig,
    "cluster": ClusterConfig,
    "log": LogConfig,
    "topics": TopicsConfig,
    "groups": GroupsConfig,
    "lfs": LfsConfig,
    "limits": LimitsConfig,
    "logging": LoggingConfig,
}
# Every option by its name (flags, KAFSCALE_* variables and TOML keys use these names), with its section.
_SECTION_OF: dict[str, str] = {item.name: section for section, kind in SECTIONS.items() for item in fields(kind)}


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """The gateway's configuration, in sections; options keep their flat names outside
    (flags, environment, TOML, :meth:`of`)."""

    network: NetworkConfig = field(default_factory=NetworkConfig)
    tls: TlsConfig = field(default_factory=TlsConfig)
    sasl: SaslConfig = field(default_factory=SaslConfig)
    acl: AclConfig = field(default_factory=AclConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    log: LogConfig = field(default_factory=LogConfig)
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    lfs: LfsConfig = field(default_factory=LfsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @classmethod
    def of(cls, **options: Any) -> GatewayConfig:
        """A config from options by their flat names (``GatewayConfig.of(port=0, storage="memory://")``)."""
        return cls().with_options(**options)

    def with_options(self, **options: Any) -> GatewayConfig:
        """This config with some options (by their flat names) changed."""
        changed: dict[str, dict[str, Any]] = {}
        for name, value in options.items():
            section = _SECTION_OF.get(name)
            if section is None:
                raise ConfigError(f"unknown option {name!r}")
            changed.setdefault(section, {})[name] = value
        return replace(self, **{section: replace(getattr(self, section), **values)
                                for section, values in changed.items()})

    def option(self, name: str) -> Any:
        """An option's value by its flat name."""
        return getattr(getattr(self, _SECTION_OF[name]), name)

    @staticmethod
    def options() -> list[Field]:
        """Every option's field, section by section."""
        return [item for kind in SECTIONS.values() for item in fields(kind)]

    @property
    def resolved_log(self) -> ResolvedLog:
        """The log options whose -1 (0 for flush_bytes) means the backend's default, resolved:
        an S3 PUT costs money and a segment is a billed PUT, a file write does not."""
        log, on_s3 = self.log, self.storage.on_s3
        return ResolvedLog(
            linger_ms=log.linger_ms if log.linger_ms >= 0 else (250 if on_s3 else 0),
            flush_bytes=log.flush_bytes if log.flush_bytes > 0 else (16 if on_s3 else 4) * 2**20,
            compaction_delay_ms=log.compaction_delay_ms if log.compaction_delay_ms >= 0 else (
                600_000 if on_s3 else 60_000),
            compaction_min_bytes=log.compaction_min_bytes if log.compaction_min_bytes > 0 else (
                64 if on_s3 else 4) * 2**20)

    def __repr__(self) -> str:
        shown = ", ".join(f"{item.name}={'***' if item.metadata.get('secret') and self.option(item.name) else self.option(item.name)!r}"
                          for item in self.options())
        return f"GatewayConfig({shown})"

    def validate(self) -> GatewayConfig:
        for item in self.options():
            value = self.option(item.name)
            minimum = item.metadata.get("minimum")
            if minimum is not None and value < minimum:
                raise ConfigError(f"{item.name} must be >= {minimum}, got {value}")
            maximum = item.metadata.get("maximum")
            if maximum is not None and value > maximum:
                raise ConfigError(f"{item.name} must be <= {maximum}, got {value}")
            choices = item.metadata.get("choices")
            if choices and value not in choices:
                raise ConfigError(f"{item.name} must be one of {', '.join(choices)}, got {value!r}")
        _ = self.network.requested_node_id  # raises ConfigError when it is neither auto nor a number
        self._validate_workers()
        log, storage = self.log, self.storage
        if log.compaction_time_percent > 100:
            raise ConfigError(f"compaction_time_percent must be <= 100, got {log.compaction_time_percent}")
        if log.segment_bytes < log.max_message_bytes:
            raise ConfigError("segment_bytes must be at least max_message_bytes")
        if self.cluster.enabled and self.cluster.cluster_refresh_ms * 3 > self.cluster.lease_ttl_ms:
            raise ConfigError("cluster_refresh_ms must be at most a third of lease_ttl_ms")
        try:
            check_location(storage.storage)
        except ValueError as exc:
            raise ConfigError(f"storage: {exc}") from None
        if not storage.namespace or "/" in storage.namespace:
            raise ConfigError("namespace must be a non-empty name without '/'")
        self._validate_security()
        return self

    def _validate_workers(self) -> None:
        network = self.network
        if network.worker_count == 1 and not network.is_worker:
            return
        if network.requested_node_id != "auto":
            raise ConfigError("workers: each worker takes a free node id, so node_id must be auto")
        if network.advertised_port or network.advertised_listeners:
            raise ConfigError("workers: each worker advertises its own port, so advertised_port and "
                              "advertised_listeners cannot be set (advertised_host can)")
        if any(listener.port == 0 for listener in network.kafka_listeners):
            raise ConfigError("workers: the listeners they share need fixed ports, not 0")
        if self.storage.storage.startswith("memory://"):
            raise ConfigError("workers cannot share memory://: each process would have a store of its own")
        if not self.cluster.enabled and not network.is_worker and self.storage.on_s3:
            raise ConfigError("workers on S3 need etcd (etcd_endpoints): alone, the workers' coordination is "
                              "kept in a local storage directory")
        if network.is_worker and not network.worker_sockets:
            raise ConfigError("worker_slot is set by the parent of --workers, with worker_sockets")

    def _validate_security(self) -> None:
        network, tls, sasl = self.network, self.tls, self.sasl
        network.protocol_map()
        listeners = network.kafka_listeners
        if len({(listener.host, listener.port) for listener in listeners if listener.port}) != \
                len([listener for listener in listeners if listener.port]):
            raise ConfigError("listeners: two listeners on one address")
        unknown = set(network.advertised_endpoints) - {listener.name for listener in listeners}
        if unknown:
            raise ConfigError(f"advertised_listeners: no listener named {', '.join(sorted(unknown))}")
        if any(listener.tls for listener in listeners) or tls.http_ssl:
            if not tls.ssl_certfile:
                raise ConfigError("an SSL or SASL_SSL listener (or http_ssl) needs ssl_certfile")
        if tls.ssl_client_auth != "none" and not tls.ssl_cafile:
            raise ConfigError("ssl_client_auth needs ssl_cafile (the CAs client certificates chain to)")
        unknown_mechanisms = set(sasl.mechanisms) - set(SASL_MECHANISMS)
        if unknown_mechanisms:
            raise ConfigError(f"sasl_enabled_mechanisms: unknown {', '.join(sorted(unknown_mechanisms))} "
                              f"(known: {', '.join(SASL_MECHANISMS)})")
        if any(listener.sasl for listener in listeners) and not sasl.mechanisms:
            raise ConfigError("a SASL listener needs at least one of sasl_enabled_mechanisms")
        if bool(sasl.sasl_bootstrap_user) != bool(sasl.sasl_bootstrap_password):
            raise ConfigError("sasl_bootstrap_user and sasl_bootstrap_password go together")
        for principal in self.acl.super_user_set:
            kind, sep, name = principal.partition(":")
            if not sep or not kind or not name:
                raise ConfigError(f"super_users: {principal!r} is not Type:name (User:admin)")


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
    if kind is str and isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)  # node_id = 3 in a TOML file
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
    parser.add_argument("--version", action="version", version=f"kafscale-gateway {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML file with option = value lines")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration, where each value came from (secrets masked), and exit")
    for item in GatewayConfig.options():
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


@dataclass(frozen=True)
class LoadedConfig:
    """The configuration and where each option's value came from (``default``, the file,
    ``env KAFSCALE_...`` or ``--flag``); ``print_config`` asks for it to be shown, not run."""

    config: GatewayConfig
    sources: dict[str, str]
    print_config: bool

    def describe(self) -> str:
        """The effective options as TOML lines (secrets masked), each with its source."""
        lines = []
        for section, kind in SECTIONS.items():
            lines.append(f"# [{section}] {kind.__doc__.splitlines()[0] if kind.__doc__ else ''}".rstrip())
            for item in fields(kind):
                value = self.config.option(item.name)
                shown = '"***"' if item.metadata.get("secret") and value else _toml(value)
                lines.append(f"{item.name} = {shown}  # {self.sources.get(item.name, 'default')}")
        return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def load_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    return resolve_config(argv, environ).config


def resolve_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """Defaults < TOML file < KAFSCALE_* environment < flags, validated, with each value's source."""
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    known = {item.name: item for item in GatewayConfig.options()}
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
            sources[name] = f"file {config_file}"
    for name, item in known.items():
        env = "KAFSCALE_" + name.upper()
        if env in environ:
            values[name] = _parse_value(name, _field_type(item), environ[env], env)
            sources[name] = f"env {env}"
    for name, item in known.items():
        raw = getattr(args, name)
        if raw is not None:
            flag = "--" + name.replace("_", "-")
            values[name] = _parse_value(name, _field_type(item), raw, flag)
            sources[name] = f"flag {flag}"
    return LoadedConfig(GatewayConfig.of(**values).validate(), sources, args.print_config)
