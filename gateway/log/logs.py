"""The partitions this gateway serves: one :class:`PartitionLog` each, the writer they share,
compaction and retention."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.group_records import OFFSETS_TOPIC
from kafscale.protocol.layout import topic_prefix

from ..clock import Clock
from ..config import GatewayConfig
from ..maintenance import MaintenanceFailures, every
from ..metadata import MetadataStore, TopicInfo
from ..ownership import Mode, Ownership
from ..storage import AsyncStore
from ..topic_configs import TopicPolicy, topic_policy
from .cache import ByteLRU
from .cleaner import Cleaner
from .compaction import Compactor
from .damage import DamageReport
from .fencing import Fencer
from .log_objects import LogObjects
from .log_writer import LogWriter
from .partition_log import LogSettings, PartitionLog
from .recovery import recover
from .retention import delete_before_log_start, enforce_retention

__all__ = ["INTERNAL_TOPICS", "LogManager", "SharedLog", "shared_log", "validate_topic_name"]

log = logging.getLogger("kafscale.logs")

# Kafka's internal topics (Topic.isInternal, and KRaft's own log): never created by a client
# (lag monitors ask Metadata for __consumer_offsets; auto-creation made it a user topic).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state", "__cluster_metadata"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_YIELD_EVERY = 1000  # partitions handled between checkpoints in whole-catalog loops


def validate_topic_name(name: str | None) -> None:
    # fullmatch: "$" would also match before a final newline ("abc\n").
    if not name or not _LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"invalid topic name {name!r}")


@dataclass(frozen=True, slots=True)
class SharedLog:
    """One gateway run's shared-log machinery: the log objects it knows, its writer, and the
    fencer that seals other writers; wired the same way for the server and its tests."""

    damage: DamageReport
    objects: LogObjects
    writer: LogWriter
    fencer: Fencer


def shared_log(store: AsyncStore, namespace: str, node_id: int, linger_ms: int, flush_bytes: int, *,
               mode: Mode, clock: Clock, live_nodes: Callable[[], set[int]], fill_wait_ms: int = 0,
               on_new_writer: Callable[[], None] = lambda: None) -> SharedLog:
    """``mode`` CLUSTER: other gateways share the store (their writers are live; a writer of this
    node sealed whole goes on as a new one). Alone, every other writer is an earlier run of
    this gateway, and a run sealed whole by a newer one stops writing."""
    damage = DamageReport()
    objects = LogObjects(store, namespace, damage)
    writer = LogWriter(store, namespace, node_id, objects, linger_ms, flush_bytes, mode=mode, clock=clock,
                       fill_wait_ms=fill_wait_ms, on_new_writer=on_new_writer)
    fencer = Fencer(store, namespace, objects, lambda: writer.writer_id, live_nodes, damage, mode=mode, clock=clock)
    return SharedLog(damage, objects, writer, fencer)


class LogManager:
    def __init__(self, config: GatewayConfig, store: AsyncStore, metadata: MetadataStore,
                 ownership: Ownership, failures: MaintenanceFailures, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.failures = failures
        self.store = store
        self.metadata = metadata
        self.ownership = ownership
        self.mode = ownership.mode
        self.cache: ByteLRU = ByteLRU(config.limits.cache_bytes)
        resolved = config.resolved_log
        machinery = shared_log(store, config.storage.namespace, ownership.node_id, resolved.linger_ms,
                               resolved.flush_bytes, mode=self.mode, clock=clock, fill_wait_ms=config.log.fill_wait_ms,
                               live_nodes=lambda: {broker.node_id for broker in self.ownership.brokers()},
                               on_new_writer=self._fence_loaded)
        self.damage, self.objects = machinery.damage, machinery.objects
        self.writer, self.fencer = machinery.writer, machinery.fencer
        self.compactor = Compactor(self, failures, time_share=config.log.compaction_time_percent / 100)
        self.cleaner = Cleaner(self, failures, config.log.cleaner_dedupe_buffer_bytes,
                               config.log.cleaner_backoff_ms / 1000, time_share=config.log.compaction_time_percent / 100)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._loading: dict[tuple[str, int], trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._catalog: dict[str, TopicInfo] | None = None  # the metadata store's dict, as last seen
        self._served: dict[str, TopicInfo] = {}
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._partition_counts: dict[str, int] = {}
        self._policies: dict[str, tuple[TopicInfo, TopicPolicy]] = {}

    async def start(self) -> None:
        """Before serving: fence earlier runs of this gateway, know the log objects, open
        this run's writer (so other gateways can seal it)."""
        await self.fencer.seal_earlier_runs()
        await self.writer.open()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Owns the writer, compaction and retention tasks; returns after :meth:`close`."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.writer.run)
            await nursery.start(self.compactor.run)
            await nursery.start(self.cleaner.run)
            task_status.started()
            await every(self.config.topics.retention_check_interval_ms / 1000, "retention", self.enforce_retention,
                        self.failures)

    def settings_for(self, info: TopicInfo) -> LogSettings:
        return LogSettings(self.config.storage.namespace, self.policy(info).segment_bytes, self.config.log.index_interval,
                           self.config.log.producer_scan_bytes, self.config.resolved_log.compaction_delay_ms,
                           self.config.resolved_log.compaction_min_bytes)

    def policy(self, info: TopicInfo | None) -> TopicPolicy:
        """The topic's enforced configs (the broker's defaults for a topic not known); read on
        every produce request, so kept per topic until its catalog entry changes."""
        if info is None:
            return topic_policy({}, self.config)
        known = self._policies.get(info.name)
        if known is None or known[0] is not info:
            known = self._policies[info.name] = (info, topic_policy(info.configs, self.config))
        return known[1]

    def max_message_bytes(self, topic: str) -> int:
        return self.policy(self.topics().get(topic)).max_message_bytes

    async def enforce_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every partition of every topic; returns segments deleted."""
        now_ms = self.clock.now_ms() if now_ms is None else now_ms
        deleted = 0
        for info in list(self.topics().values()):
            policy = None
            with self.failures.guard("retention", info.name):  # a config it cannot use holds no other topic up
                policy = self.policy(info)
            if policy is None or not policy.delete:
                continue  # compact only: the cleaner removes what is superseded, nothing else goes
            for partition in range(info.partitions):
                if partition % _YIELD_EVERY == 0:
                    await trio.lowlevel.checkpoint()
                if not self.ownership.owns(info.name, partition):
                    continue  # its owner enforces it
                with self.failures.guard("retention", f"{info.name}-{partition}"):
                    try:
                        partition_log = await self.get(info.name, partition)
                    except KafkaError:
                        continue  # moving, or not loadable (its load says why)
                    deleted += await enforce_retention(partition_log, policy.retention_ms, policy.retention_bytes,
                                                       now_ms)
        return deleted

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        info = await self.metadata.update_topic(name, configs=configs)
        self.apply_topic_settings(info)
        return info

    def apply_topic_settings(self, info: TopicInfo) -> None:
        """New topic configs apply to the loaded partitions from their next flush (in a
        cluster, also when another gateway changed them)."""
        for (topic, _), partition_log in self._logs.items():
            if topic == info.name:
                partition_log.reconfigure(self.settings_for(info))

    async def add_partitions(self, name: str, count: int) -> TopicInfo:
        info = self.topics().get(name)
        self.check_partition_count(name, count, info.partitions if info else 0)
        return await self.metadata.update_topic(name, partitions=count)

    def check_partition_count(self, name: str, partitions: int, current: int = 0) -> None:
        """Refuse a topic of ``partitions`` (now ``current``) beyond the configured limits:
        every gateway serves Metadata, placement and retention over the whole catalog."""
        if partitions < 1:
            raise KafkaError(ErrorCode.invalid_partitions, f"partitions must be >= 1, got {partitions}")
        limit = self.config.topics.max_partitions_per_topic
        if partitions > limit:
            raise KafkaError(ErrorCode.invalid_partitions,
                             f"{partitions} partitions exceed max_partitions_per_topic {limit}")
        # Kafka's internal topics (made by the gateway) count against no client's limit.
        total = sum(info.partitions for info in self.topics().values() if info.name not in INTERNAL_TOPICS) \
            + partitions - current
        if total > self.config.topics.max_partitions:
            raise KafkaError(ErrorCode.policy_violation,
                             f"{name!r} would bring the cluster to {total} partitions, "
                             f"beyond max_partitions {self.config.topics.max_partitions}")

    async def delete_records(self, name: str, partition: int, offset: int) -> int:
        partition_log = await self.get(name, partition)
        log_start = partition_log.move_log_start(offset)
        await self.metadata.update_topic(name, log_start={partition: log_start})
        await delete_before_log_start(partition_log)
        return log_start

    def topics(self) -> dict[str, TopicInfo]:
        """The topics this gateway serves: the catalog without any topic over
        max_partitions_per_topic (stored by an older version or with a higher limit),
        which would make Metadata and retention unbounded. Recomputed only when the
        metadata store replaces its dict (it never mutates one in place)."""
        catalog = self.metadata.topics()
        if catalog is not self._catalog:
            limit = self.config.topics.max_partitions_per_topic
            self._served = {name: info for name, info in catalog.items() if info.partitions <= limit}
            self._names_by_id = {info.topic_id: name for name, info in self._served.items()}
            self._partition_counts = {name: info.partitions for name, info in self._served.items()}
            for name in catalog.keys() - self._served.keys():
                if self._catalog is None or name not in self._catalog:
                    log.error("not serving topic %r: its %d partitions exceed max_partitions_per_topic %d "
                              "(raise the limit, or delete the topic)", name, catalog[name].partitions, limit)
            self._catalog = catalog
        return self._served

    def partition_counts(self) -> Mapping[str, int]:
        """Each served topic's partition count (what group assignors work from): kept with
        :meth:`topics`, not built per heartbeat. Read only."""
        self.topics()
        return self._partition_counts

    def names_by_id(self) -> dict[uuid.UUID, str]:
        """Each served topic's name by its id (Kafka 4 clients name topics by id in Fetch,
        Produce, OffsetCommit, heartbeats): kept with :meth:`topics`, not built per request."""
        self.topics()
        return self._names_by_id

    def check_new_topic(self, name: str, partitions: int) -> None:
        """Refuse a topic that cannot be created: a name Kafka refuses, one of its internal
        topics, a partition count beyond the limits."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS:  # Kafka: "Creation of internal topic ... is prohibited"
            raise KafkaError(ErrorCode.invalid_request, f"{name} is one of Kafka's internal topics: clients "
                             "cannot create it")
        self.check_partition_count(name, partitions)

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        self.check_new_topic(name, partitions)
        return await self.metadata.create_topic(name, partitions, configs or {})

    async def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        """One of Kafka's internal topics, created by the gateway itself (never by a client)."""
        assert name in INTERNAL_TOPICS, name
        return await self.metadata.create_topic(name, partitions, configs)

    async def ensure_topic(self, name: str) -> TopicInfo | None:
        """The topic, auto-creating it when configured to (``None`` if unknown)."""
        info = self.topics().get(name)
        if info is None and self.config.topics.auto_create_topics and name not in INTERNAL_TOPICS:
            info = await self.create_topic(name, self.config.topics.default_partitions)
        return info

    async def delete_topic(self, name: str) -> TopicInfo | None:
        """Delete a topic (also one not served for its size, so an operator can remove it)."""
        info = await self.metadata.delete_topic(name)
        if info is None:
            return None
        for key in [key for key in self._logs if key[0] == name]:
            await self._logs.pop(key).close()
        prefix = topic_prefix(self.config.storage.namespace, name)
        self.cache.discard_prefix(prefix)
        for item in await self.store.list(prefix):
            await self.store.delete(item.key)
        return info

    def _leading(self, topic: str, partition: int) -> tuple[TopicInfo, int]:
        """The topic, and the leader epoch under which this gateway serves the partition;
        raises when it does not (unknown, led elsewhere, the store taken over)."""
        info = self.topics().get(topic)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {topic!r}")
        if not 0 <= partition < info.partitions:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic} has no partition {partition}")
        leader = self.ownership.leader(topic, partition)
        if leader is None or not self.ownership.owns(topic, partition):
            raise KafkaError(ErrorCode.not_leader_or_follower, f"this gateway does not lead {topic}-{partition}")
        if self.writer.taken_over:  # not loaded again on every request: nothing could be written
            raise KafkaError(ErrorCode.not_leader_or_follower, "a newer run of this gateway took the store over")
        return info, leader[1]

    def current(self, topic: str, partition: int) -> PartitionLog | None:
        """The partition's log when it is loaded and current, without awaiting anything;
        ``None`` when :meth:`get` must load it (again). Raises as :meth:`get` does."""
        _, epoch = self._leading(topic, partition)
        existing = self._logs.get((topic, partition))
        if existing is None or existing.epoch != epoch or existing.fenced:
            return None
        return existing

    async def get(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, recovered from storage on first use."""
        info, epoch = self._leading(topic, partition)
        key = (topic, partition)
        while True:
            existing = self._logs.get(key)
            if existing is not None and (existing.epoch != epoch or existing.fenced):
                # Owned again after another gateway had it, or sealed: what we hold is stale.
                await self.release(topic, partition)
                continue
            if existing is not None:
                return existing
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        loading = self._loading[key] = trio.Event()
        try:
            partition_log = PartitionLog(topic, partition, self.store, self.settings_for(info), self.cache,
                                         self.writer, epoch=epoch, topic_id=info.topic_id.bytes,
                                         owned_epoch=lambda: self._owned_epoch(topic, partition),
                                         damage=self.damage, clock=self.clock)
            try:
                if self.mode is Mode.CLUSTER:
                    await self.fencer.fence(key)  # no former owner can store this partition any more
                await recover(partition_log, self.objects, info.log_start.get(partition, 0))
            except Exception as exc:
                log.warning("recovering %s-%d failed: %s", topic, partition, exc)
                raise KafkaError(ErrorCode.kafka_storage_error, f"cannot load {topic}-{partition}: {exc}") from exc
            self._logs[key] = partition_log
            return partition_log
        finally:
            del self._loading[key]
            loading.set()

    def _owned_epoch(self, topic: str, partition: int) -> int | None:
        leader = self.ownership.leader(topic, partition)
        return leader[1] if leader is not None and self.ownership.owns(topic, partition) else None

    def _fence_loaded(self) -> None:
        for partition_log in self._logs.values():
            partition_log.fence()  # loaded again (fencing the others) on next use

    def loaded(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def loaded_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    async def release(self, topic: str, partition: int) -> None:
        """Stop serving a partition (another gateway owns it now): what was accepted is
        flushed if this gateway may still write, failed with NOT_LEADER_OR_FOLLOWER if not."""
        partition_log = self._logs.pop((topic, partition), None)
        if partition_log is not None:
            await partition_log.close()
            self.cache.discard_prefix(partition_log.prefix)
            log.info("released %s-%d (epoch %d)", topic, partition, partition_log.epoch)

    async def close(self) -> None:
        """Flush every partition's accepted data, then stop the flushers."""
        async with trio.open_nursery() as nursery:
            for partition_log in list(self._logs.values()):
                nursery.start_soon(partition_log.close)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
