"""Structured logs: ``key=value`` text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["setup_logging"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Libraries' chatter stays below the gateway's own events: httpx logs every request to
    # etcd at INFO (90 % of a cluster's log), and its transport every step at DEBUG.
    quiet = max(logging.WARNING, root.level)
    for library in ("httpx", "httpcore", "botocore", "urllib3", "h11"):
        logging.getLogger(library).setLevel(quiet)
