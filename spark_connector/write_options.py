"""The sink's options, with the names of Spark's Kafka sink: ``kafka.bootstrap.servers``
(the gateways the rows are produced through), ``topic`` (or a topic column), and the
``kafka.`` client settings that apply here. Delivery is at least once, as Spark's Kafka
sink; ``delivery=exactly_once`` makes it exactly once (see :mod:`.sink`), with task
transactional ids derived from ``transactionalIdPrefix`` (a stream's default: its checkpoint
location). Unknown options are refused by name."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from kafscale.kafka_client import Security
from kafscale.kafka_client.security import SecurityError, credentials_from_jaas
from kafscale.protocol.compression import Compression

from .options import OptionError

__all__ = ["WriteOptions", "parse_write_options", "AT_LEAST_ONCE", "EXACTLY_ONCE"]

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"

_KNOWN = {
    "kafka.bootstrap.servers", "topic", "delivery", "transactionalidprefix", "kafka.security.protocol",
    "kafka.sasl.mechanism", "kafka.sasl.jaas.config", "kafka.sasl.username", "kafka.sasl.password",
    "kafka.ssl.ca.location", "kafka.ssl.certificate.location", "kafka.ssl.key.location",
    "kafka.ssl.endpoint.identification.algorithm", "kafka.compression.type", "kafka.batch.size",
    "kafka.buffer.memory", "kafka.transaction.timeout.ms", "kafka.delivery.timeout.ms", "kafka.client.id",
}
# Spark's Kafka sink settings that make no sense here: refused with the reason.
_REFUSED = {
    "kafka.acks": "the sink always waits for every replica (acks=all): a lost row would break its delivery guarantee",
    "kafka.enable.idempotence": "the sink is always idempotent",
    "kafka.transactional.id": "give transactionalIdPrefix: each task's transactional id derives from it",
    "kafka.ssl.truststore.location": "a JKS trust store is Java's: give kafka.ssl.ca.location (PEM)",
    "kafka.ssl.keystore.location": "a JKS key store is Java's: give kafka.ssl.certificate.location and "
                                   "kafka.ssl.key.location (PEM)",
}
_CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
           "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    security: Security = Security()
    compression: Compression = Compression.NONE
    batch_bytes: int = 1 << 20
    buffer_bytes: int = 32 << 20
    transaction_timeout_ms: int = 900_000  # the gateway's default transaction_max_timeout_ms
    delivery_timeout_s: float = 120.0
    client_id: str = "kafscale-spark-sink"


def _int(name: str, value: str, minimum: int = 1) -> int:
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise OptionError(f"option {name} must be an integer >= {minimum}, got {value!r}")
    return number


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    lowered = {key.lower(): value for key, value in options.items()}
    refused = sorted(set(lowered) & set(_REFUSED))
    if refused:
        raise OptionError("; ".join(f"option {name}: {_REFUSED[name]}" for name in refused))
    unknown = sorted(set(lowered) - _KNOWN - {"path", "checkpointlocation"})
    if unknown:
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for writing format kafscale")
    servers = lowered.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("writing format kafscale produces through the gateways: give kafka.bootstrap.servers")
    delivery = lowered.get("delivery", AT_LEAST_ONCE).lower()
    if delivery not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise OptionError(f"option delivery must be {AT_LEAST_ONCE} or {EXACTLY_ONCE}, got {delivery!r}")
    prefix = lowered.get("transactionalidprefix")
    if delivery == EXACTLY_ONCE and not prefix and "checkpointlocation" in lowered:
        # A stream's checkpoint is unique to its query and the same across restarts.
        digest = hashlib.sha256(lowered["checkpointlocation"].encode()).hexdigest()[:20]
        prefix = f"kafscale-sink-{digest}"
    if delivery == EXACTLY_ONCE and not prefix:
        raise OptionError("delivery exactly_once needs transactionalIdPrefix: an id unique to this job or query "
                          "and the same across its restarts (each task's transactional id derives from it)")
    codec = lowered.get("kafka.compression.type", "none").lower()
    if codec not in _CODECS:
        raise OptionError(f"option kafka.compression.type must be one of {', '.join(_CODECS)}, got {codec!r}")
    username, password = lowered.get("kafka.sasl.username"), lowered.get("kafka.sasl.password")
    try:
        if "kafka.sasl.jaas.config" in lowered:
            username, password = credentials_from_jaas(lowered["kafka.sasl.jaas.config"])
        security = Security(
            protocol=lowered.get("kafka.security.protocol", "PLAINTEXT").upper(),
            mechanism=lowered.get("kafka.sasl.mechanism", "PLAIN").upper(),
            username=username, password=password, ca_file=lowered.get("kafka.ssl.ca.location"),
            cert_file=lowered.get("kafka.ssl.certificate.location"), key_file=lowered.get("kafka.ssl.key.location"),
            check_hostname=lowered.get("kafka.ssl.endpoint.identification.algorithm", "https").lower() == "https")
    except SecurityError as exc:
        raise OptionError(str(exc)) from exc
    return WriteOptions(
        bootstrap_servers=servers,
        topic=lowered.get("topic"),
        exactly_once=delivery == EXACTLY_ONCE,
        transactional_id_prefix=prefix,
        security=security,
        compression=_CODECS[codec],
        batch_bytes=_int("kafka.batch.size", lowered.get("kafka.batch.size", str(1 << 20))),
        buffer_bytes=_int("kafka.buffer.memory", lowered.get("kafka.buffer.memory", str(32 << 20))),
        transaction_timeout_ms=_int("kafka.transaction.timeout.ms",
                                    lowered.get("kafka.transaction.timeout.ms", "900000")),
        delivery_timeout_s=_int("kafka.delivery.timeout.ms", lowered.get("kafka.delivery.timeout.ms", "120000")) / 1000,
        client_id=lowered.get("kafka.client.id", "kafscale-spark-sink"),
    )
