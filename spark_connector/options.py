"""The reader's options, with the names and meaning of Spark's Kafka source.

Where Kafka's source takes ``kafka.bootstrap.servers``, ours takes where the data
is: the ``path`` (``./data``, ``s3://bucket/prefix``) plus storage options.
Unknown or contradictory options are refused with a message naming them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafscale.storage_backends import S3Options

from .client_settings import CLIENT_OPTIONS, ClientSettings, parse_client_settings
from .errors import OptionError

__all__ = ["ReadOptions", "OptionError", "parse_options", "positive_int", "EARLIEST", "LATEST"]

EARLIEST = -2
LATEST = -1

_KNOWN = {
    "path", "namespace", "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "includeheaders", "failondataloss", "s3.endpoint", "s3.region", "s3.accesskeyid", "s3.secretaccesskey",
    "s3.pathstyle", "s3.allowhttp", "maxoffsetspertrigger", "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "minpartitions", "maxrecordsperpartition",
    "minoffsetspertrigger", "maxtriggerdelay", "kafka.isolation.level", "startingoffsetsbytimestampstrategy",
    "pushfilters", "progressgroup", "lfs.resolve", "lfs.maxbytes",
} | CLIENT_OPTIONS


@dataclass(frozen=True)
class ReadOptions:
    path: str
    namespace: str = "kafscale"
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: int | dict[str, dict[int, int]] = EARLIEST
    ending: int | dict[str, dict[int, int]] = LATEST
    include_headers: bool = False
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    ending_given: bool = False
    # By timestamp: one timestamp for every partition, or {"topic": {partition: timestamp}}.
    starting_timestamp: int | dict[str, dict[int, int]] | None = None
    ending_timestamp: int | dict[str, dict[int, int]] | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    # kafka.isolation.level: read_committed reads below each partition's last stable offset and
    # drops aborted transactions' records; read_uncommitted (Spark's default) reads them all.
    read_committed: bool = False
    # startingOffsetsByTimestampStrategy: a partition with no record at or after its starting
    # timestamp fails the query ("error", Spark's default) or starts at its latest offset.
    no_record_at_timestamp_fails: bool = True
    # pushFilters: take Spark's pushed filters (needs spark.sql.python.filterPushdown.enabled,
    # off by default in PySpark, where a reader that takes filters fails without it).
    push_filters: bool = False
    # progressGroup: a stream commits each micro-batch's end offsets to this consumer group
    # through the gateways (``client``), for lag tools; the checkpoint stays the truth.
    progress_group: str | None = None
    client: ClientSettings | None = None
    s3: dict[str, str] = field(default_factory=dict)
    # lfs.resolve: LFS pointer records as stored ("none"), replaced by their objects' bytes
    # ("bytes", each checked, at most lfs.maxBytes), or with a column lfs_uri naming them ("uri").
    lfs_resolve: str = "none"
    lfs_max_bytes: int = 128 << 20

    def s3_options(self) -> S3Options:
        s3 = self.s3
        return S3Options(
            endpoint=s3.get("endpoint"), region=s3.get("region"), access_key_id=s3.get("accesskeyid"),
            secret_access_key=s3.get("secretaccesskey"), path_style=s3.get("pathstyle", "false").lower() == "true",
            allow_http=s3.get("allowhttp", "false").lower() == "true",
        )

    def topic_matches(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return topic in (self.assign or {})


# Spark's Kafka source options that configure its Kafka consumer, which this reader does not
# have (it reads storage): refused by name, with the reason.
_NO_CONSUMER = "format kafscale reads storage, with no Kafka consumer to configure"
_REFUSED = {
    "kafkaconsumer.polltimeoutms": _NO_CONSUMER,
    "fetchoffset.numretries": _NO_CONSUMER + " (a planning read that fails is retried by the store client)",
    "fetchoffset.retryintervalms": _NO_CONSUMER,
    "groupidprefix": _NO_CONSUMER + "; to show a stream's progress to lag tools give progressGroup",
    "kafka.group.id": _NO_CONSUMER + "; to show a stream's progress to lag tools give progressGroup",
}


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(f"option {name} must be true or false, got {value!r}")


def _offsets(name: str, value: str, *, ending: bool) -> int | dict[str, dict[int, int]]:
    lowered = value.strip().lower()
    if lowered == "earliest":
        if ending:
            raise OptionError(f"option {name} cannot be 'earliest'")
        return EARLIEST
    if lowered == "latest":
        return LATEST
    try:
        document = json.loads(value)
        parsed = {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in document.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise OptionError(f"option {name} must be earliest, latest or JSON like "
                          f'{{"topic": {{"0": 23, "1": -2}}}}, got {value!r}') from exc
    for topic, parts in parsed.items():
        for partition, offset in parts.items():
            if offset < -2 or (ending and offset == EARLIEST):
                raise OptionError(f"option {name}: offset {offset} for {topic}-{partition} is not valid")
    return parsed


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def _duration_ms(name: str, value: str) -> int:
    """Durations as Spark writes them: '15m', '30s', '500ms' (a bare number is ms)."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h)?\s*", value)
    if not match:
        raise OptionError(f"option {name} must be a duration like 30s or 15m, got {value!r}")
    return int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]


def positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {value!r}")
    return number


def _positive(name: str, value: str | None) -> int | None:
    return None if value is None else positive_int(name, value)


def _timestamps(single: str, by_partition: str, lowered: Mapping[str, str]):
    if single.lower() in lowered and by_partition.lower() in lowered:
        raise OptionError(f"give {single} or {by_partition}, not both")
    if single.lower() in lowered:
        try:
            return int(lowered[single.lower()])
        except ValueError:
            raise OptionError(f"option {single} must be milliseconds since the epoch") from None
    if by_partition.lower() in lowered:
        try:
            document = json.loads(lowered[by_partition.lower()])
            return {topic: {int(p): int(t) for p, t in parts.items()} for topic, parts in document.items()}
        except (ValueError, AttributeError, TypeError):
            raise OptionError(f'option {by_partition} must be JSON like {{"topic": {{"0": 1700000000000}}}}') from None
    return None


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    lowered = {key.lower(): value for key, value in options.items()}
    refused = sorted(set(lowered) & set(_REFUSED))
    if refused:
        raise OptionError("; ".join(f"option {name}: {_REFUSED[name]}" for name in refused))
    unknown = sorted(set(lowered) - _KNOWN)
    consumer_settings = [name for name in unknown if name.startswith("kafka.")]
    if consumer_settings:
        raise OptionError(f"option(s) {', '.join(consumer_settings)}: {_NO_CONSUMER} (only a stream's progressGroup "
                          "uses kafka.bootstrap.servers and the kafka.* security settings)")
    isolation = lowered.get("kafka.isolation.level", "read_uncommitted").lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"option kafka.isolation.level must be read_committed or read_uncommitted, got {isolation!r}")
    if unknown:
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for format kafscale")
    progress_group = lowered.get("progressgroup")
    if "kafka.bootstrap.servers" in lowered and not progress_group:
        raise OptionError("format kafscale reads storage, not a broker: give the data location as the path "
                          "(load('./data') or load('s3://bucket/prefix')) instead of kafka.bootstrap.servers "
                          "(which only a stream's progressGroup uses)")
    if progress_group is not None and not lowered.get("kafka.bootstrap.servers"):
        raise OptionError("option progressGroup commits offsets through the gateways: give kafka.bootstrap.servers")
    client = parse_client_settings(lowered, "kafscale-spark-progress") if progress_group else None
    path = lowered.get("path")
    if not path:
        raise OptionError("format kafscale needs the data location: load('./data') or option('path', ...)")
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if name in lowered]
    if len(chosen) != 1:
        raise OptionError("give exactly one of subscribe, subscribePattern, assign"
                          + (f" (got {', '.join(chosen)})" if chosen else ""))
    subscribe = tuple(t.strip() for t in lowered.get("subscribe", "").split(",") if t.strip())
    if "subscribe" in lowered and not subscribe:
        raise OptionError("option subscribe names no topic")
    pattern = lowered.get("subscribepattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid pattern: {exc}") from exc
    assign = None
    if "assign" in lowered:
        try:
            assign = {topic: tuple(int(p) for p in parts) for topic, parts in json.loads(lowered["assign"]).items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise OptionError(f'option assign must be JSON like {{"topic": [0, 1]}}, got {lowered["assign"]!r}') from exc
    s3 = {key[len("s3."):]: value for key, value in lowered.items() if key.startswith("s3.")}
    max_offsets = None
    if "maxoffsetspertrigger" in lowered:
        try:
            max_offsets = int(lowered["maxoffsetspertrigger"])
        except ValueError:
            max_offsets = 0
        if max_offsets <= 0:
            raise OptionError(f"option maxOffsetsPerTrigger must be a positive integer, got {lowered['maxoffsetspertrigger']!r}")
    starting_timestamp = _timestamps("startingTimestamp", "startingOffsetsByTimestamp", lowered)
    ending_timestamp = _timestamps("endingTimestamp", "endingOffsetsByTimestamp", lowered)
    if starting_timestamp is not None and "startingoffsets" in lowered:
        raise OptionError("give startingOffsets or a starting timestamp, not both")
    if ending_timestamp is not None and "endingoffsets" in lowered:
        raise OptionError("give endingOffsets or an ending timestamp, not both")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    return ReadOptions(
        path=path,
        namespace=lowered.get("namespace", "kafscale"),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offsets("startingOffsets", lowered.get("startingoffsets", "earliest"), ending=False),
        ending=_offsets("endingOffsets", lowered.get("endingoffsets", "latest"), ending=True),
        include_headers=_bool("includeHeaders", lowered.get("includeheaders", "false")),
        fail_on_data_loss=_bool("failOnDataLoss", lowered.get("failondataloss", "true")),
        max_offsets_per_trigger=max_offsets,
        ending_given="endingoffsets" in lowered or ending_timestamp is not None,
        starting_timestamp=starting_timestamp,
        ending_timestamp=ending_timestamp,
        min_partitions=_positive("minPartitions", lowered.get("minpartitions")),
        min_offsets_per_trigger=_positive("minOffsetsPerTrigger", lowered.get("minoffsetspertrigger")),
        max_trigger_delay_ms=_duration_ms("maxTriggerDelay", lowered.get("maxtriggerdelay", "15m")),
        max_records_per_partition=_positive("maxRecordsPerPartition", lowered.get("maxrecordsperpartition")),
        read_committed=isolation == "read_committed",
        no_record_at_timestamp_fails=strategy == "error",
        push_filters=_bool("pushFilters", lowered.get("pushfilters", "false")),
        progress_group=progress_group,
        client=client,
        s3=s3,
        lfs_resolve=_lfs_mode(lowered.get("lfs.resolve", "none")),
        lfs_max_bytes=_positive("lfs.maxBytes", lowered.get("lfs.maxbytes")) or 128 << 20,
    )


def _lfs_mode(value: str) -> str:
    mode = value.strip().lower()
    if mode not in ("none", "bytes", "uri"):
        raise OptionError(f"option lfs.resolve must be none, bytes or uri, got {value!r}")
    return mode
