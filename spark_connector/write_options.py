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

from kafscale.protocol.compression import Compression

from .client_settings import CLIENT_OPTIONS, ClientSettings, parse_client_settings
from .options import OptionError, positive_int

__all__ = ["WriteOptions", "parse_write_options", "AT_LEAST_ONCE", "EXACTLY_ONCE"]

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"

_KNOWN = CLIENT_OPTIONS | {
    "topic", "delivery", "transactionalidprefix", "kafka.compression.type", "kafka.batch.size",
    "kafka.buffer.memory", "kafka.transaction.timeout.ms", "kafka.delivery.timeout.ms",
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
    client: ClientSettings
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    compression: Compression = Compression.NONE
    batch_bytes: int = 512 << 10  # under the default max.message.bytes (1 MiB) with room to spare
    buffer_bytes: int = 32 << 20
    transaction_timeout_ms: int = 900_000  # the gateway's default transaction_max_timeout_ms
    delivery_timeout_s: float = 120.0


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    lowered = {key.lower(): value for key, value in options.items()}
    refused = sorted(set(lowered) & set(_REFUSED))
    if refused:
        raise OptionError("; ".join(f"option {name}: {_REFUSED[name]}" for name in refused))
    unknown = sorted(set(lowered) - _KNOWN - {"path", "checkpointlocation"})
    if unknown:
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for writing format kafscale")
    if not lowered.get("kafka.bootstrap.servers"):
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
    return WriteOptions(
        client=parse_client_settings(lowered, "kafscale-spark-sink"),
        topic=lowered.get("topic"),
        exactly_once=delivery == EXACTLY_ONCE,
        transactional_id_prefix=prefix,
        compression=_CODECS[codec],
        batch_bytes=positive_int("kafka.batch.size", lowered.get("kafka.batch.size", str(512 << 10))),
        buffer_bytes=positive_int("kafka.buffer.memory", lowered.get("kafka.buffer.memory", str(32 << 20))),
        transaction_timeout_ms=positive_int("kafka.transaction.timeout.ms",
                                    lowered.get("kafka.transaction.timeout.ms", "900000")),
        delivery_timeout_s=positive_int("kafka.delivery.timeout.ms", lowered.get("kafka.delivery.timeout.ms", "120000")) / 1000,
    )
