"""``spark.readStream.format("kafscale")``: micro-batches over committed offsets.

Offsets are ``{"topic": {"partition": next_offset}}`` (partition numbers as strings,
as JSON wants), so a query resumes from Spark's checkpoint. New partitions and
new topics matching the subscription are picked up from their log start.
``maxOffsetsPerTrigger`` bounds a micro-batch (shared over partitions in
proportion to their backlog); ``minOffsetsPerTrigger`` holds a micro-batch back
until that many records wait or ``maxTriggerDelay`` passed; Trigger.AvailableNow
reads up to the offsets that existed when the query started, then stops. Under
``kafka.isolation.level`` read_committed, "latest" is each partition's last stable offset.
``progressGroup`` commits each finished micro-batch's end offsets to that consumer group
through the gateways, so lag tools show the query like any consumer (never read back: the
checkpoint is the query's truth). They are committed when Spark asks for the next offsets
(``latestOffset``'s start is the end of a finished micro-batch: Spark plans the next only
after the last one's commit is in the checkpoint) and when Spark commits to the source
(which it does late, or never for Trigger.AvailableNow's last micro-batch).
"""

from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow

from kafscale.kafka_client.groups import commit_offsets

from .options import EARLIEST, LATEST, ReadOptions
from .planning import partition_range, read_catalog, starting_at_timestamp
from .stored_log import DataLossError, LogEntries, readable, snapshot
from .tasks import KafscaleInputPartition, read_rows

__all__ = ["KafscaleStreamReader"]

log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]

# A progress commit waits at most this long, and after a failure none is tried for a while:
# lag reporting must not hold up the query when the gateways are unreachable.
_PROGRESS_TIMEOUT_S = 5.0
_PROGRESS_PAUSE_S = 60


class KafscaleStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, open_location) -> None:
        self.options = options
        self._open = open_location
        self._target: Offsets | None = None
        self._last_trigger = time.monotonic()
        self._latest_seen: Offsets | None = None
        self._progress_committed: Offsets | None = None
        self._progress_paused_until = 0.0  # after a failed commit: the query is never held up by it

    def _snapshots(self):
        store = self._open(self.options)
        entries = LogEntries(store, self.options.namespace)
        topics = read_catalog(store, self.options.namespace)
        found = {}
        for topic in sorted(topics):
            if not self.options.topic_matches(topic):
                continue
            info = topics[topic]
            partitions = self.options.assign[topic] if self.options.assign is not None else range(info.partitions)
            for partition in partitions:
                snap = snapshot(store, self.options.namespace, info, partition, entries.of(info, partition))
                found[(topic, partition)] = (snap, readable(store, self.options.namespace, topic, partition, snap,
                                                            self.options.read_committed))
        return found

    def _latest(self) -> Offsets:
        latest: Offsets = {}
        for (topic, partition), (_, allowed) in self._snapshots().items():
            latest.setdefault(topic, {})[str(partition)] = allowed.latest
        self._latest_seen = latest
        return latest

    def reportLatestOffset(self) -> Offsets | None:
        """The latest offsets seen when the micro-batch was planned (PySpark 4.2+ shows them in
        the query's progress, as Spark's Kafka source does)."""
        return self._latest_seen

    def initialOffset(self) -> Offsets:
        initial: Offsets = {}
        store = self._open(self.options)
        for (topic, partition), (snap, allowed) in self._snapshots().items():
            wanted = self.options.starting
            if isinstance(wanted, dict):
                wanted = wanted.get(topic, {}).get(partition, EARLIEST)
            offset = snap.log_start if wanted == EARLIEST else allowed.latest if wanted == LATEST else wanted
            offset = starting_at_timestamp(store, self.options, topic, partition, snap, allowed.latest, offset)
            initial.setdefault(topic, {})[str(partition)] = offset
        return initial

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: Offsets, limit) -> Offsets:
        self._commit_progress(start)
        latest = self._target if self._target is not None else self._latest()
        begin = {topic: dict(parts) for topic, parts in (start or {}).items()}
        backlog = {}
        for topic, parts in latest.items():
            for partition, end in parts.items():
                # A partition not in ``start`` is new: it is read from its beginning.
                backlog[(topic, partition)] = (begin.get(topic, {}).get(partition, 0), end)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        total = sum(max(end - first, 0) for first, end in backlog.values())
        minimum = self.options.min_offsets_per_trigger
        if (minimum and total < minimum and self._target is None and not isinstance(limit, ReadAllAvailable)
                and (time.monotonic() - self._last_trigger) * 1000 < self.options.max_trigger_delay_ms):
            return start  # minOffsetsPerTrigger: wait for more, at most maxTriggerDelay
        if total:
            self._last_trigger = time.monotonic()
        result: Offsets = {}
        for (topic, partition), (first, end) in sorted(backlog.items()):
            take = max(end - first, 0)
            if budget is not None and total > budget:
                take = take * budget // total  # proportional share, rounding down
            result.setdefault(topic, {})[partition] = first + take
        if budget is not None and total > budget and sum(
                result[t][p] - backlog[(t, p)][0] for t, p in backlog) == 0:
            # Every share rounded to zero: advance the partition with the largest backlog.
            (topic, partition), (first, end) = max(backlog.items(), key=lambda item: item[1][1] - item[1][0])
            result[topic][partition] = first + min(budget, end - first)
        return result

    def partitions(self, start: Offsets, end: Offsets):
        snapshots = self._snapshots()
        ranges = []
        for topic, parts in end.items():
            for partition_text, stop in parts.items():
                partition = int(partition_text)
                first = (start or {}).get(topic, {}).get(partition_text, 0)
                found = snapshots.get((topic, partition))
                if found is None or first >= stop:
                    continue
                snap, allowed = found
                if first < snap.log_start:
                    if self.options.fail_on_data_loss:
                        raise DataLossError(
                            f"{topic}-{partition}: offsets {first}..{snap.log_start - 1} are no longer stored "
                            f"(log start {snap.log_start}); set failOnDataLoss=false to skip them")
                    first = snap.log_start
                ranges.append(KafscaleInputPartition(
                    partition_range(topic, partition, first, stop, snap.pieces, allowed), self.options))
        return ranges

    def read(self, partition):
        yield from read_rows(self._open(partition.options), partition)

    def commit(self, end: Offsets) -> None:
        """Segments are immutable and read in place: nothing to release."""
        self._commit_progress(end)

    def _commit_progress(self, done: Offsets | None) -> None:
        """With progressGroup, offsets up to ``done`` go to the group (a failure is logged,
        never fails the query)."""
        group, client = self.options.progress_group, self.options.client
        if (group is None or client is None or not done or done == self._progress_committed
                or time.monotonic() < self._progress_paused_until):
            return
        offsets = {(topic, int(partition)): offset for topic, parts in done.items()
                   for partition, offset in parts.items()}
        try:
            with client.cluster(timeout_s=_PROGRESS_TIMEOUT_S) as cluster:
                commit_offsets(cluster, group, offsets)
            self._progress_committed = done
        except Exception as exc:  # progress for lag tools only: the checkpoint is the truth
            self._progress_paused_until = time.monotonic() + _PROGRESS_PAUSE_S
            log.warning("committing progress to group %r failed (next try in %d s): %s", group,
                        _PROGRESS_PAUSE_S, exc)
