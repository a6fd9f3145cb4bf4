"""Prometheus metrics of one gateway (its own registry, so tests can run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.inflight_bytes = Gauge(
            "kafscale_inflight_request_bytes", "Request bytes being processed", registry=self.registry
        )
