"""Damaged stored data this gateway came across: objects it could not read, in whole or in
part, and offsets no readable piece holds. Operators see it three ways: one error log line
per damaged thing, the ``kafscale_damaged_objects`` gauge, and /readyz's answer (which stays
200: one damaged object must not take a whole gateway out of service)."""

from __future__ import annotations

import logging

__all__ = ["DamageReport"]

log = logging.getLogger("kafscale.damage")

_SHOWN = 3  # damaged things named in /readyz's answer


class DamageReport:
    def __init__(self) -> None:
        self.found: dict[str, str] = {}  # what is damaged (an object key, a group) -> how
        self.rebuilding: set[str] = set()  # partitions whose derived state is being rebuilt from their log

    def record(self, what: str, how: str) -> None:
        if what not in self.found:
            log.error("damaged stored data: %s: %s", what, how)
        self.found[what] = how

    def names_object(self, key: str) -> bool:
        """Whether the object ``key`` (or an entry of it, ``key#position``) is recorded damaged."""
        return key in self.found or any(what.startswith(key + "#") for what in self.found)

    def __len__(self) -> int:
        return len(self.found)

    def summary(self) -> str:
        named = ", ".join(list(self.found)[:_SHOWN])
        more = f" and {len(self.found) - _SHOWN} more" if len(self.found) > _SHOWN else ""
        return f"{len(self.found)} damaged stored object(s): {named}{more}"
