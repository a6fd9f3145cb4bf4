"""The one place a gateway is put together: its mode, and every part given what it needs
at construction.

Two modes, chosen by the config (``etcd_endpoints`` set or not):

- **embedded**: one gateway; topics, groups, credentials and ACLs live in its own
  store. Every other writer found in the store is an earlier run of it: it is sealed
  at start, and a run whose writer a newer run sealed whole stops writing
  (``LogWriter.taken_over``; /readyz answers 503) instead of going on beside it.
- **cluster**: gateways sharing a store, coordinated through etcd (metadata, a lease,
  partition and group-slot owners). A gateway taken for dead by the others goes on as
  a new writer once its lease is back, loading every partition again.

The server and the tests build gateways here, so what is tested is what runs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from kafscale.protocol.features import GROUP_VERSION, SHARE_VERSION, TRANSACTION_VERSION, Features
from kafscale.storage_backends import ObjectStore, StorageError, open_store

from .clock import Clock
from .cluster.catalog_mirror import mirror_catalog
from .cluster.membership import ClusterMember, ClusterStartError
from .cluster.node_lease import NodeIdTaken, NodeLease, held_node
from .cluster.rebalance import Rebalancer
from .cluster.view import SECURITY
from .config import GatewayConfig
from .context import GatewayContext
from .etcd import EtcdClient, EtcdError, tls_context
from .fetch_sessions import FetchSessions
from .groups import EmbeddedGroupStore, GroupCoordinator
from .groups.configs import GROUP_CONFIGS_PART, EmbeddedGroupConfigs, EtcdGroupConfigs
from .groups.offsets_topic import ClusterOffsetsTopic, OffsetsTopic
from .groups.settings import GroupSettings
from .groups.store import EtcdGroupStore
from .lfs import LfsService
from .lfs.objects import GatewayHeldObjects, LfsObjects, PresignedObjects
from .log import LogManager
from .maintenance import MaintenanceFailures
from .metadata import EmbeddedMetadataStore, EtcdMetadataStore, MetadataStore, MetadataUnreadable, cluster_root
from .metrics import Metrics
from .ownership import Endpoint, Mode, SoleGateway
from .security.access import Access
from .security.store import EmbeddedSecurityStore, EtcdSecurityStore, SecurityStore
from .shares.coordinator import ShareCoordinator
from .shares.store import ShareStateStore
from .storage import AsyncStore
from .topic_configs import TopicPolicy
from .transactions.coordinator import TransactionCoordinator
from .transactions.markers import GatewayMarkers
from .transactions.store import (
    EmbeddedTransactionStore,
    EtcdTransactionStore,
    TransactionStore,
    TransactionsUnreadable,
)

__all__ = ["Mode", "Gateway", "StartupError", "open_storage", "assemble", "mode_of"]

log = logging.getLogger("kafscale.gateway")


class StartupError(RuntimeError):
    """The gateway cannot start (bad storage, port in use...); the message says why."""


def mode_of(config: GatewayConfig) -> Mode:
    """CLUSTER when etcd_endpoints is set."""
    return Mode.CLUSTER if config.cluster.enabled else Mode.EMBEDDED


async def open_storage(config: GatewayConfig) -> tuple[ObjectStore, AsyncStore]:
    """The configured store, checked to be usable."""
    try:
        backend = open_store(config.storage.storage, fsync=config.storage.fsync, s3=config.storage.s3_options)
        await trio.to_thread.run_sync(backend.check)
    except (ValueError, OSError, StorageError) as exc:
        raise StartupError(f"cannot use storage {config.storage.storage!r}: {exc}") from exc
    return backend, AsyncStore(backend, config.limits.storage_threads)


class Embedded:
    """Coordination of a lone gateway: nothing to join; its groups load from its store."""

    mode = Mode.EMBEDDED

    def __init__(self, groups: GroupCoordinator) -> None:
        self._groups = groups

    async def join(self) -> None:
        await self._groups.load()

    async def run(self, nursery: trio.Nursery) -> None:
        """Nothing runs beside the logs and groups."""

    async def drain(self, grace_s: float) -> None:
        """Nothing to hand over: the gateway's clients have nowhere else to go."""


class Clustered:
    """Coordination through etcd: the member's lease and view, the rebalancer, and the
    catalog mirrored into the store for Spark."""

    mode = Mode.CLUSTER

    def __init__(self, etcd: EtcdClient, member: ClusterMember, rebalancer: Rebalancer, metadata: EtcdMetadataStore,
                 store: AsyncStore, namespace: str) -> None:
        self.etcd = etcd
        self.member = member
        self._rebalancer = rebalancer
        self._metadata = metadata
        self._store = store
        self._namespace = namespace

    async def join(self) -> None:
        try:
            await self.member.join()
            await self._rebalancer.reconcile()
        except ClusterStartError as exc:
            raise StartupError(str(exc)) from exc

    async def run(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.member.run)
        await nursery.start(self._rebalancer.run)
        nursery.start_soon(mirror_catalog, self._metadata, self._store, self._namespace)

    async def drain(self, grace_s: float) -> None:
        """Hand every partition and group slot over, one by one as the rebalancer moves them
        (each flushed first), for at most ``grace_s``; what is left moves when the lease is
        revoked."""
        with trio.move_on_after(grace_s) as grace:
            try:
                await self.member.drain()
            except EtcdError as exc:
                log.warning("cannot announce draining (partitions move when the lease is revoked): %s", exc)
                return
            while self.member.held_units():
                await trio.sleep(0.05)
        if grace.cancelled_caught:
            log.warning("drain grace over with %d partition(s) and group slot(s) still held",
                        self.member.held_units())
        else:
            log.info("drained: every partition and group slot handed over")


Coordination = Embedded | Clustered


class Gateway:
    """Every part of one gateway, built and wired: :meth:`start` loads and joins, :meth:`run`
    runs the background work; at shutdown :meth:`drain` hands what a cluster gateway owns
    over and :meth:`flush` writes what was accepted."""

    def __init__(self, config: GatewayConfig, store: AsyncStore, clock: Clock, metrics: Metrics, metadata: MetadataStore,
                 security: SecurityStore, groups: GroupCoordinator, shares: ShareCoordinator, logs: LogManager,
                 access: Access, coordination: Coordination, transactions: TransactionCoordinator,
                 lfs: LfsService) -> None:
        self.node_id = logs.ownership.node_id
        self.config = config
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.metadata = metadata
        self.security = security
        self.groups = groups
        self.shares = shares
        self.logs = logs
        self.access = access
        self.coordination = coordination
        self.transactions = transactions
        self.lfs = lfs
        # The levels change only with the configuration, so only at a restart: the start time
        # is an epoch that grows with them (and gateways configured alike tell the same levels).
        features = Features({GROUP_VERSION: 1, TRANSACTION_VERSION: config.groups.transaction_version, SHARE_VERSION: 1},
                            epoch=clock.now_ms())
        self.context = GatewayContext(config, clock, logs, metrics, groups, self.shares, access, transactions, lfs,
                                      FetchSessions(config.limits.fetch_session_cache_slots), features)

    @property
    def mode(self) -> Mode:
        return self.coordination.mode

    async def start(self) -> None:
        """Load the catalog, credentials and ACLs, fence earlier runs, open the writer, join."""
        try:
            await self.metadata.load()
            await self.security.load()
            await self.groups.configs.load()
            await self.access.bootstrap()
            await self.logs.start()
            await self.coordination.join()
            await self.transactions.load()
            await self.shares.load()
        except TransactionsUnreadable as exc:
            raise StartupError(f"{exc} (restore it from a backup, or move it aside)") from exc
        except StorageError as exc:
            raise StartupError(f"storage {self.store.describe()} is unavailable: {exc}") from exc
        except MetadataUnreadable as exc:
            raise StartupError(f"{exc} (restore it from a backup, or move it aside to start empty)") from exc
        except EtcdError as exc:
            raise StartupError(f"etcd at {self.config.cluster.etcd_endpoints}: {exc}") from exc
        self.metrics.watch_log(self.logs, self.clock.now_ms)
        self.metrics.watch_groups(self.groups)
        self.metrics.watch_fetch_sessions(self.context.fetch_sessions)
        self.metrics.watch_shares(self.shares)
        if isinstance(self.coordination, Clustered):
            self.metrics.watch_cluster(self.coordination.member, self.coordination.etcd)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The logs' writer and maintenance, the groups' timers, the cluster's loops, the
        transactions' finishing and sweeps."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.logs.run)
            await nursery.start(self.groups.run)
            await nursery.start(self.shares.run)
            await self.coordination.run(nursery)
            await nursery.start(self.transactions.run, self.config.groups.transaction_check_interval_ms / 1000)
            # One gateway of a cluster cleans LFS objects up: the coordinator of group slot 0.
            nursery.start_soon(self.lfs.run_sweeps, lambda: 0 in self.groups.owned_slots())
            task_status.started()

    async def drain(self, grace_s: float) -> None:
        """Before the clients are sent away: a cluster gateway hands its partitions and group
        slots to the others, so clients move on without waiting for its lease to end."""
        await self.coordination.drain(grace_s)

    async def flush(self) -> None:
        """Write every accepted append (produce handlers waiting on it get answered)."""
        await self.logs.close()


@asynccontextmanager
async def assemble(config: GatewayConfig, store: AsyncStore, endpoints: tuple[Endpoint, ...],
                   clock: Clock) -> AsyncIterator[Gateway]:
    """The gateway ``config`` describes, on ``store``, reachable at ``endpoints``, reading the
    time of day from ``clock``. A cluster
    gateway holds its node id (:mod:`.cluster.node_lease`) for the body, before anything
    is stored under it, and gives it up after."""
    host, port = config.network.advertised
    requested = config.network.requested_node_id
    if mode_of(config) is Mode.EMBEDDED:
        yield _embedded(config, store, clock, SoleGateway(0 if requested == "auto" else requested, host, port, endpoints))
        return
    etcd = _etcd_client(config)
    root = cluster_root(config.cluster.etcd_prefix, config.network.cluster_id)
    ttl_s = max(2, -(-config.cluster.lease_ttl_ms // 1000))
    node = NodeLease(etcd, root, ttl_s, requested, host, port, endpoints)
    try:
        async with held_node(node, wait_s=ttl_s + 2):
            yield _clustered(config, store, clock, etcd, root, node)
    except* NodeIdTaken as taken:
        raise StartupError(str(taken.exceptions[0])) from None
    except* EtcdError as failed:
        raise StartupError(f"etcd at {', '.join(etcd.endpoints)}: {failed.exceptions[0]}") from None
    finally:
        with trio.CancelScope(shield=True):
            await etcd.aclose()


def _embedded(config: GatewayConfig, store: AsyncStore, clock: Clock, sole: SoleGateway) -> Gateway:
    metrics, failures = _observed()
    metadata = EmbeddedMetadataStore(store, config.storage.namespace)
    security = EmbeddedSecurityStore(store, config.storage.namespace)
    logs = LogManager(config, store, metadata, sole, failures, clock)
    groups = GroupCoordinator(EmbeddedGroupStore(store, config.storage.namespace), _group_settings(config),
                              on_rebalance=lambda group_id: metrics.rebalances.inc(),
                              offsets_log=OffsetsTopic(logs, config.groups.offsets_topic_num_partitions, failures),
                              configs=EmbeddedGroupConfigs(store, config.storage.namespace),
                              mode=Mode.EMBEDDED, slots=1)
    transactions = EmbeddedTransactionStore(store, config.storage.namespace)
    return _gateway(config, store, clock, metrics, failures, metadata, security, logs, groups, Embedded(groups),
                    transactions)


def _clustered(config: GatewayConfig, store: AsyncStore, clock: Clock, etcd: EtcdClient, root: str, node: NodeLease) -> Gateway:
    metrics, failures = _observed()
    metadata = EtcdMetadataStore(etcd, root)
    security = EtcdSecurityStore(etcd, root)
    group_configs = EtcdGroupConfigs(etcd, root)
    member = ClusterMember(config, etcd, metadata, {SECURITY: security, GROUP_CONFIGS_PART: group_configs}, root, node)
    group_store = EtcdGroupStore(etcd, root, config.cluster.coordinator_slots, lease=lambda: node.lease)
    logs = LogManager(config, store, metadata, member, failures, clock)
    groups = GroupCoordinator(group_store, _group_settings(config), on_rebalance=lambda group_id: metrics.rebalances.inc(),
                              offsets_log=ClusterOffsetsTopic(logs, config.groups.offsets_topic_num_partitions,
                                                              failures, group_store),
                              configs=group_configs, mode=Mode.CLUSTER, slots=config.cluster.coordinator_slots)
    rebalancer = Rebalancer(member, logs, groups, config.cluster.cluster_refresh_ms / 1000)
    coordination = Clustered(etcd, member, rebalancer, metadata, store, config.storage.namespace)
    return _gateway(config, store, clock, metrics, failures, metadata, security, logs, groups, coordination,
                    EtcdTransactionStore(etcd, root))


def _observed() -> tuple[Metrics, MaintenanceFailures]:
    metrics = Metrics()
    failures = MaintenanceFailures()
    metrics.watch_maintenance(failures)
    return metrics, failures


def _group_settings(config: GatewayConfig) -> GroupSettings:
    groups = config.groups
    return GroupSettings(groups.group_min_session_timeout_ms, groups.group_max_session_timeout_ms,
                         groups.group_initial_rebalance_delay_ms,
                         consumer_session_timeout_ms=groups.group_consumer_session_timeout_ms,
                         consumer_heartbeat_interval_ms=groups.group_consumer_heartbeat_interval_ms,
                         consumer_max_size=groups.group_consumer_max_size,
                         share_session_timeout_ms=groups.group_share_session_timeout_ms,
                         share_heartbeat_interval_ms=groups.group_share_heartbeat_interval_ms,
                         share_record_lock_duration_ms=groups.group_share_record_lock_duration_ms,
                         share_delivery_count_limit=groups.group_share_delivery_count_limit,
                         share_partition_max_record_locks=groups.group_share_partition_max_record_locks,
                         share_max_size=groups.group_share_max_size,
                         share_auto_offset_reset=groups.group_share_auto_offset_reset,
                         share_isolation_level=groups.group_share_isolation_level)


def _gateway(config: GatewayConfig, store: AsyncStore, clock: Clock, metrics: Metrics, failures: MaintenanceFailures,
             metadata: MetadataStore, security: SecurityStore, logs: LogManager, groups: GroupCoordinator,
             coordination: Coordination, transaction_store: TransactionStore) -> Gateway:
    """The parts both modes build alike, around the mode's stores and coordination."""
    markers = GatewayMarkers(logs, groups, logs.ownership.node_id)
    transactions = TransactionCoordinator(transaction_store, metadata.allocate_producer_id, markers,
                                          clock.now_ms, config.groups.transaction_max_timeout_ms,
                                          failures=failures, mode=mode_of(config),
                                          id_expiration_ms=config.groups.transactional_id_expiration_ms)
    try:
        access = Access(config, security, metrics)
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read sasl_plain_users_file: {exc}") from exc
    metrics.watch_transactions(transactions, markers)

    def policy_of(topic: str) -> TopicPolicy | None:
        info = logs.topics().get(topic)
        return None if info is None else logs.policy(info)

    lfs = LfsService(store, _lfs_objects(config, store), config.lfs, config.storage.namespace, metrics, policy_of,
                     failures, clock)
    shares = ShareCoordinator(ShareStateStore(store, config.storage.namespace), groups.settings_of, failures,
                              session_slots=config.limits.fetch_session_cache_slots)
    return Gateway(config, store, clock, metrics, metadata, security, groups, shares, logs, access, coordination,
                   transactions, lfs)


def _lfs_objects(config: GatewayConfig, store: AsyncStore) -> LfsObjects:
    """Pre-signed URLs on S3; elsewhere the gateway takes and serves the bytes itself."""
    if config.storage.on_s3:
        bucket, _, prefix = config.storage.storage[len("s3://"):].partition("/")
        return PresignedObjects(bucket, prefix.strip("/"), config.storage.s3_options, config.lfs.lfs_part_bytes)
    return GatewayHeldObjects(store.sync)


def _etcd_client(config: GatewayConfig) -> EtcdClient:
    try:
        etcd_tls = tls_context(config.cluster.etcd_cafile, config.cluster.etcd_certfile, config.cluster.etcd_keyfile)
        return EtcdClient([e.strip() for e in config.cluster.etcd_endpoints.split(",") if e.strip()],
                          config.cluster.etcd_timeout_ms, tls=etcd_tls, username=config.cluster.etcd_username,
                          password=config.cluster.etcd_password)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise StartupError(f"cannot set up the etcd client: {exc}") from exc
