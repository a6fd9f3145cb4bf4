"""The wall clock, one for the whole gateway, given to every part that reads the time of day.

Record timestamps (LogAppendTime, CreateTime bounds), retention, transaction and upload
expiry, commit stamps and the stamps written into log objects all read it, so a test can
move a whole gateway's time with a :class:`ManualClock`. Deadlines and timers run on trio's
own clock (``trio.current_time``, replaceable through ``trio.run(clock=...)``); durations
reported as metrics use ``time.perf_counter``: neither is the time of day.
"""

from __future__ import annotations

import time

__all__ = ["Clock", "ManualClock"]


class Clock:
    """The system's wall clock."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        return time.time_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that moves only when told to (tests)."""

    def __init__(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> None:
        self._now_ms += ms
