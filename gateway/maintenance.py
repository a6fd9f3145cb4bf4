"""Background work that never ends the gateway.

Retention, compaction, the cleaner, transaction sweeps and the LFS clean-up each go over
many items (topics, partitions, transactional ids, upload sessions). As Kafka's log
cleaner marks one partition uncleanable and goes on with the others, a failure of one
item here is logged, counted by task and skipped; the next pass tries it again. Only
cancellation (a ``BaseException``) gets through: a bug or a value the code cannot use
stops that item, never the gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import trio

from kafscale.protocol.errors import KafkaError
from kafscale.storage_backends import StorageError

__all__ = ["MaintenanceFailures", "Outcome", "every"]

log = logging.getLogger("kafscale.maintenance")


class Outcome:
    """Whether the item a guard ran failed."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


class MaintenanceFailures:
    """Failures of background work, counted by task (``kafscale_maintenance_failures_total``)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._last: dict[tuple[str, str], str] = {}  # the error last logged per item failing now

    @contextmanager
    def guard(self, task: str, item: str) -> Iterator[Outcome]:
        """Run one item of ``task``; an exception is recorded and swallowed (``failed`` says so)."""
        outcome = Outcome()
        try:
            yield outcome
        except Exception as exc:  # the point: nothing an item does ends the loop
            outcome.failed = True
            self.record(task, item, exc)
        else:
            self._last.pop((task, item), None)  # it works again: a new failure is logged again

    def record(self, task: str, item: str, exc: Exception) -> None:
        self.counts[task] = self.counts.get(task, 0) + 1
        text = f"{type(exc).__name__}: {exc}"
        if self._last.get((task, item)) == text:  # the same failure every pass: logged once
            log.debug("%s of %s failed again (skipped): %s", task, item, text)
            return
        self._last[task, item] = text
        # A store or a partition that is unavailable says enough; anything else is a defect
        # whose traceback is wanted.
        expected = isinstance(exc, (KafkaError, StorageError, OSError))
        log.error("%s of %s failed (skipped, tried again next pass): %s", task, item, text,
                  exc_info=None if expected else exc)


async def every(interval_s: float, task: str, one_pass: Callable[[], Awaitable[object]],
                failures: MaintenanceFailures) -> None:
    """Run ``one_pass`` every ``interval_s`` for ever, whatever a pass raises."""
    while True:
        await trio.sleep(interval_s)
        with failures.guard(task, "a pass"):
            await one_pass()
