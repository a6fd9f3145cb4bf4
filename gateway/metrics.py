"""Prometheus metrics of one gateway (its own registry, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kafscale_requests_total", "Kafka requests handled", ["api", "version"], registry=self.registry
        )
        self.request_errors = Counter(
            "kafscale_request_errors_total", "Requests answered with an unexpected server error", ["api"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "kafscale_request_seconds", "Time to answer a request", ["api"], registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        # Each request counts once and is timed once: the labelled children are looked up per
        # API (and version) once, not on every request (labels() costs a few µs each time).
        self._request_children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self.connections = Gauge("kafscale_connections", "Open client connections", registry=self.registry)
        self.produced_bytes = Counter(
            "kafscale_produced_bytes_total", "Record-batch bytes accepted", registry=self.registry
        )
        self.produced_records = Counter(
            "kafscale_produced_records_total", "Records accepted", registry=self.registry
        )
        self.fetched_bytes = Counter(
            "kafscale_fetched_bytes_total", "Record-batch bytes served", registry=self.registry
        )
        self.protocol_errors = Counter(
            "kafscale_protocol_errors_total", "Connections closed for breaking the protocol", registry=self.registry
        )
        self.rebalances = Counter(
            "kafscale_group_rebalances_total", "Consumer-group rebalances started", registry=self.registry
        )
        self.incremental_fetches = Counter(
            "kafscale_incremental_fetches_total", "Fetches answered within an incremental fetch session (KIP-227)",
            registry=self.registry)
        self.authentications = Counter(
            "kafscale_authentications_total", "SASL and TLS authentications", ["mechanism", "result"],
            registry=self.registry,
        )
        self.authorization_denials = Counter(
            "kafscale_authorization_denials_total", "Operations refused by the ACLs", ["operation", "resource_type"],
            registry=self.registry,
        )
        # Large File Support, named as the LFS design names them.
        self.lfs_upload_requests = Counter(
            "kafscale_lfs_upload_requests", "LFS upload sessions started", registry=self.registry)
        self.lfs_upload_bytes = Counter(
            "kafscale_lfs_upload_bytes", "Bytes of LFS uploads completed", registry=self.registry)
        self.lfs_pointer_records = Counter(
            "kafscale_lfs_pointer_records", "LFS pointer records accepted on produce", registry=self.registry)
        self.lfs_validation_errors = Counter(
            "kafscale_lfs_validation_errors", "Records and uploads refused by LFS validation", ["reason"],
            registry=self.registry)
        self.lfs_head_latency = Histogram(
            "kafscale_lfs_head_latency_ms", "Latency of the HEAD that checks a pointer's object (ms)",
            registry=self.registry, buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000))
        self.lfs_objects_deleted = Counter(
            "kafscale_lfs_objects_deleted", "LFS objects deleted by the clean-up", ["reason"], registry=self.registry)
        self.inflight_bytes = Gauge(
            "kafscale_inflight_request_bytes", "Request and unsent response bytes held for clients", registry=self.registry
        )

    def request_metrics(self, api: str, version: int) -> tuple[Counter, Histogram]:
        """(requests counter, request-seconds histogram) of one API version."""
        key = (api, version)
        found = self._request_children.get(key)
        if found is None:
            found = self._request_children[key] = (self.requests.labels(api, str(version)),
                                                   self.request_seconds.labels(api))
        return found

    def watch_log(self, logs, now_ms: Callable[[], int]) -> None:
        """The shared log: what reaches the store, and what compaction still has to do. Totals
        (rates come from the scraper), read at scrape time."""
        writer, compactor, objects, cleaned = logs.writer, logs.compactor, logs.objects, logs.cleaner.stats

        def oldest_age() -> float:
            oldest = objects.backlog[2]
            return 0.0 if oldest is None else max((now_ms() - oldest) / 1000, 0.0)

        for name, text, read in [
            ("kafscale_log_objects_written", "Shared log objects written (total)", lambda: writer.objects_written),
            ("kafscale_log_object_bytes_written", "Bytes of shared log objects written (total)",
             lambda: writer.bytes_written),
            ("kafscale_segments_compacted", "Segments written by compaction (total)", lambda: compactor.segments_written),
            ("kafscale_segments_merged", "Small segments merged into larger ones (total)",
             lambda: compactor.segments_merged),
            ("kafscale_log_objects_deleted", "Log objects deleted once compacted (total)",
             lambda: compactor.objects_deleted),
            ("kafscale_compaction_errors", "Failed compactions and passes (total)", lambda: compactor.errors),
            ("kafscale_compaction_backlog_objects", "Log objects holding data not yet deleted",
             lambda: objects.backlog[0]),
            ("kafscale_compaction_backlog_bytes", "Bytes of those log objects", lambda: objects.backlog[1]),
            ("kafscale_compaction_backlog_age_seconds", "Age of the oldest of them", oldest_age),
            ("kafscale_seals_written", "Seals put in other writers' sequences (total)",
             lambda: logs.fencer.seals_written),
            ("kafscale_cleaner_passes", "Cleaning passes over compacted partitions (total)", lambda: cleaned.passes),
            ("kafscale_cleaner_errors", "Failed cleaning passes (total)", lambda: cleaned.errors),
            ("kafscale_cleaner_seconds", "Time spent in cleaning passes (total)", lambda: cleaned.seconds),
            ("kafscale_cleaner_bytes_read", "Dirty segment bytes the cleaner mapped (total)",
             lambda: cleaned.bytes_read),
            ("kafscale_cleaner_bytes_removed", "Bytes the cleaner removed from segments (total)",
             lambda: cleaned.bytes_removed),
            ("kafscale_cleaner_records_removed", "Superseded records, expired tombstones and keyless records "
             "removed (total)", lambda: cleaned.records_removed),
            ("kafscale_cleaner_segments_rewritten", "Segments rewritten by the cleaner (total)",
             lambda: cleaned.segments_rewritten),
            ("kafscale_cleaner_keys_mapped", "Most keys one pass held in its key map", lambda: cleaned.keys_mapped),
            ("kafscale_cleaner_stalled_passes", "Passes that could not advance: the key map took no key (total)",
             lambda: cleaned.stalled_passes),
            ("kafscale_cleaner_dirty_bytes", "Segment bytes of compacted partitions not cleaned yet",
             lambda: cleaned.dirty_bytes),
            ("kafscale_cleaner_max_dirty_ratio", "Worst dirty ratio of a compacted partition at the last check",
             lambda: cleaned.worst_dirty_ratio),
            ("kafscale_damaged_objects", "Stored objects (and partitions' offset ranges) found damaged: "
             "served in part, never silently skipped", lambda: len(logs.damage)),
            ("kafscale_transaction_state_rebuilds", "Partitions whose damaged transaction state is being rebuilt "
             "from their whole log now", lambda: len(logs.damage.rebuilding)),
        ]:
            Gauge(name, text, registry=self.registry).set_function(read)

    def watch_maintenance(self, failures) -> None:
        """Failures of background work by task: each skipped item, tried again next pass."""
        registry = self.registry

        class Collector:
            def collect(self):
                family = CounterMetricFamily("kafscale_maintenance_failures",
                                             "Items of background work that failed and were skipped", labels=["task"])
                for task, count in sorted(failures.counts.items()):
                    family.add_metric([task], count)
                yield family

        registry.register(Collector())

    def watch_transactions(self, coordinator, markers) -> None:
        stats = coordinator.stats
        for name, text, read in [
            ("kafscale_transactions_committed", "Transactions this gateway completed as committed (total)",
             lambda: stats.committed),
            ("kafscale_transactions_aborted", "Transactions this gateway completed as aborted (total)",
             lambda: stats.aborted),
            ("kafscale_transactions_timed_out", "Transactions this gateway aborted at their timeout (total)",
             lambda: stats.timed_out),
            ("kafscale_transactional_ids_expired", "Transactional ids deleted after transactional_id_expiration_ms "
             "unused (total)", lambda: stats.ids_expired),
            ("kafscale_transaction_store_writes", "Transaction states written to the metadata store (total)",
             lambda: stats.store_writes),
            ("kafscale_transaction_markers_written", "Transaction markers this gateway appended (total)",
             lambda: markers.markers_written),
        ]:
            Gauge(name, text, registry=self.registry).set_function(read)

    def watch_groups(self, groups) -> None:
        Gauge("kafscale_damaged_groups", "Groups not served because their stored state is unreadable",
              registry=self.registry).set_function(lambda: len(groups.damaged))

    def watch_fetch_sessions(self, sessions) -> None:
        Gauge("kafscale_fetch_sessions", "Incremental fetch sessions cached (KIP-227; at most "
              "fetch_session_cache_slots)", registry=self.registry).set_function(lambda: len(sessions))

    def watch_shares(self, shares) -> None:
        """Share groups (KIP-932), read at scrape time."""
        for name, text, read in [
            ("kafscale_share_sessions", "Share sessions open here", lambda: len(shares.sessions)),
            ("kafscale_share_partitions_held", "Share-partitions whose state this gateway holds",
             lambda: len(shares.held_keys())),
            ("kafscale_share_acquired_records", "Records acquired by share consumers (total)", lambda: shares.acquired),
            ("kafscale_share_acknowledged_records", "Records acknowledged by share consumers (total)",
             lambda: shares.acknowledged),
            ("kafscale_share_state_writes", "Share-partition state objects written (total)", lambda: shares.saves),
        ]:
            Gauge(name, text, registry=self.registry).set_function(read)

    def watch_cluster(self, member, etcd) -> None:
        """Cluster mode: what this gateway owns and how much it asks of etcd, read at scrape time."""
        owned = Gauge("kafscale_owned_partitions", "Partitions this gateway leads", registry=self.registry)
        owned.set_function(lambda: member.owned_count())
        lease = Gauge("kafscale_lease_valid", "1 while this gateway's etcd lease surely holds", registry=self.registry)
        lease.set_function(lambda: 1 if member.lease_valid() else 0)
        for name, text, read in [
            ("kafscale_ownership_acquired", "Partitions and group slots claimed (total)", lambda: member.acquired),
            ("kafscale_ownership_released", "Partitions and group slots handed over (total)", lambda: member.released),
            ("kafscale_etcd_requests", "etcd requests made (total)", lambda: etcd.requests),
            ("kafscale_etcd_writes", "etcd writes made: puts, transactions, lease grants (total)", lambda: etcd.writes),
        ]:
            Gauge(name, text, registry=self.registry).set_function(read)
