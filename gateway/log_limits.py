"""Log lines a client can cause, held to one per source address per interval.

A client that reconnects in a tight loop (pykafka sending Produce v0 several hundred times
in five seconds) or guesses passwords must not fill the log: the first line of a source is
written, the ones after it within ``interval_s`` are counted, and the next line written for
that source says how many were held back.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["PerSourceLog"]


class PerSourceLog:
    def __init__(self, logger: logging.Logger, level: int = logging.WARNING, interval_s: float = 60.0,
                 max_sources: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._level = level
        self._interval_s = interval_s
        self._max_sources = max_sources
        self._clock = clock
        self._sources: OrderedDict[str, tuple[float, int]] = OrderedDict()  # source -> (written at, held back)

    def log(self, source: str, message: str, *args: object) -> bool:
        """Write ``message`` for ``source`` unless one was written within the interval; True if written."""
        now = self._clock()
        written_at, held = self._sources.get(source, (float("-inf"), 0))
        if now - written_at < self._interval_s:
            self._sources[source] = (written_at, held + 1)
            return False
        if held:
            message += " (%d more like it from this source in the last %.0f s not logged)"
            args = (*args, held, self._interval_s)
        self._logger.log(self._level, message, *args)
        self._sources[source] = (now, 0)
        self._sources.move_to_end(source)
        while len(self._sources) > self._max_sources:  # the oldest source is forgotten
            self._sources.popitem(last=False)
        return True
