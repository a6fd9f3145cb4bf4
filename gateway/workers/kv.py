"""The coordination store a parent keeps for its workers: etcd's data model, sans-io.

Keys with create and modify revisions, leases whose end deletes their keys, guarded
transactions and a history of changes to watch from. Only what the gateway's cluster code
asks of etcd (:mod:`kafscale.gateway.etcd`) is here, with etcd's meaning: one revision per
write request, however many keys it touches; a compare on a missing key sees revisions and
lease 0 and no value; a watch from a revision older than the history kept is told so
(compacted) and reads again.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = ["Compare", "Entry", "Event", "KeyValueStore", "LeaseNotFound", "Op"]

HISTORY_EVENTS = 20_000  # changes kept for watches that fall behind (etcd keeps revisions until compacted)


class LeaseNotFound(Exception):
    """A put under a lease that never existed or has ended."""


@dataclass(frozen=True, slots=True)
class Entry:
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True, slots=True)
class Event:
    revision: int
    key: bytes
    entry: Entry | None  # None: the key was deleted


@dataclass(frozen=True, slots=True)
class Compare:
    """One guard: ``target`` is VALUE, CREATE, MOD, VERSION or LEASE; ``result`` EQUAL,
    NOT_EQUAL, GREATER or LESS."""

    key: bytes
    target: str
    value: int | bytes
    result: str = "EQUAL"

    def holds(self, entry: Entry | None) -> bool:
        if self.target == "VALUE":
            if entry is None:
                return False  # etcd: a value compare on a missing key fails
            actual: int | bytes = entry.value
        else:
            actual = 0 if entry is None else {"CREATE": entry.create_revision, "MOD": entry.mod_revision,
                                               "VERSION": entry.version, "LEASE": entry.lease}[self.target]
        wanted = self.value
        if self.result == "EQUAL":
            return actual == wanted
        if self.result == "NOT_EQUAL":
            return actual != wanted
        if self.result == "GREATER":
            return actual > wanted  # type: ignore[operator]  # same kind by construction
        if self.result == "LESS":
            return actual < wanted  # type: ignore[operator]
        raise ValueError(f"unknown compare result {self.result!r}")


@dataclass(frozen=True, slots=True)
class Op:
    """One request inside a transaction: ``kind`` is range, put or delete."""

    kind: str
    key: bytes
    range_end: bytes = b""
    value: bytes = b""
    lease: int = 0


@dataclass(slots=True)
class _Lease:
    ttl_s: int
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class KeyValueStore:
    """``on_change`` is told each write's revision and the keys it changed (entry None:
    deleted), after it applied: the journal persists them."""

    def __init__(self, revision: int = 0, data: dict[bytes, Entry] | None = None, *,
                 on_change: Callable[[int, dict[bytes, Entry | None]], None] = lambda revision, changes: None,
                 history: int = HISTORY_EVENTS) -> None:
        self.revision = revision
        self._data: dict[bytes, Entry] = dict(data or {})
        self._keys = sorted(self._data)
        self._leases: dict[int, _Lease] = {}
        # Leases end with the parent; starting past what the last run's revision suggests keeps
        # a worker of that run still dying from refreshing a new lease that took its id.
        self._lease_ids = itertools.count(revision * 1000 + 1)
        self._events: deque[Event] = deque(maxlen=history)
        self.compacted = revision  # watches must start after this
        self._on_change = on_change

    # -- reads

    def get(self, key: bytes) -> Entry | None:
        return self._data.get(key)

    def range(self, key: bytes, range_end: bytes = b"") -> list[tuple[bytes, Entry]]:
        if not range_end:
            entry = self._data.get(key)
            return [] if entry is None else [(key, entry)]
        return [(k, self._data[k]) for k in self._span(key, range_end)]

    def _span(self, key: bytes, range_end: bytes) -> Iterator[bytes]:
        start = bisect.bisect_left(self._keys, key)
        end = len(self._keys) if range_end == b"\0" else bisect.bisect_left(self._keys, range_end)
        return iter(self._keys[start:end])

    def items(self) -> list[tuple[bytes, Entry]]:
        return [(k, self._data[k]) for k in self._keys]

    # -- writes

    def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        self.txn([], [Op("put", key, value=value, lease=lease)], [])

    def delete(self, key: bytes, range_end: bytes = b"") -> int:
        _, (deleted,) = self.txn([], [Op("delete", key, range_end)], [])
        assert isinstance(deleted, int)
        return deleted

    def txn(self, compares: list[Compare], success: list[Op], failure: list[Op]
            ) -> tuple[bool, list[list[tuple[bytes, Entry]] | int | None]]:
        """Runs ``success`` if every compare holds, else ``failure``, as one revision.
        Answers per op: a range's pairs, a delete's count, None for a put."""
        held = all(c.holds(self._data.get(c.key)) for c in compares)
        ops = success if held else failure
        for op in ops:
            if op.kind == "put" and op.lease and op.lease not in self._leases:
                raise LeaseNotFound(f"requested lease not found: {op.lease}")
        revision = self.revision + 1
        changes: dict[bytes, Entry | None] = {}
        answers: list[list[tuple[bytes, Entry]] | int | None] = []
        for op in ops:
            if op.kind == "range":
                answers.append(self.range(op.key, op.range_end))
            elif op.kind == "put":
                changes[op.key] = self._set(op.key, op.value, op.lease, revision)
                answers.append(None)
            elif op.kind == "delete":
                keys = [op.key] if not op.range_end else list(self._span(op.key, op.range_end))
                gone = [k for k in keys if self._unset(k)]
                changes.update(dict.fromkeys(gone))
                answers.append(len(gone))
            else:
                raise ValueError(f"unknown op {op.kind!r}")
        if changes:
            self._commit(revision, changes)
        return held, answers

    def _set(self, key: bytes, value: bytes, lease: int, revision: int) -> Entry:
        old = self._data.get(key)
        if old is None:
            bisect.insort(self._keys, key)
        elif old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        entry = Entry(value, old.create_revision if old else revision, revision, (old.version if old else 0) + 1, lease)
        self._data[key] = entry
        if lease:
            self._leases[lease].keys.add(key)
        return entry

    def _unset(self, key: bytes) -> bool:
        old = self._data.pop(key, None)
        if old is None:
            return False
        del self._keys[bisect.bisect_left(self._keys, key)]
        if old.lease and old.lease in self._leases:
            self._leases[old.lease].keys.discard(key)
        return True

    def _commit(self, revision: int, changes: dict[bytes, Entry | None]) -> None:
        self.revision = revision
        dropped = len(self._events) + len(changes) - (self._events.maxlen or 0)
        if dropped > 0:  # the oldest changes leave the history: watches from before them must read again
            self.compacted = self._events[dropped - 1].revision if dropped <= len(self._events) else revision
        self._events.extend(Event(revision, key, entry) for key, entry in changes.items())
        self._on_change(revision, changes)

    # -- leases

    def grant(self, ttl_s: int, now: float) -> int:
        lease = next(self._lease_ids)
        self._leases[lease] = _Lease(ttl_s, now + ttl_s)
        return lease

    def keepalive(self, lease: int, now: float) -> int:
        """The lease's TTL once refreshed; 0 when it has ended."""
        held = self._leases.get(lease)
        if held is None:
            return 0
        held.deadline = now + held.ttl_s
        return held.ttl_s

    def revoke(self, lease: int) -> bool:
        held = self._leases.pop(lease, None)
        if held is None:
            return False
        if held.keys:
            revision = self.revision + 1
            gone = [k for k in sorted(held.keys) if self._unset(k)]
            if gone:
                self._commit(revision, dict.fromkeys(gone))
        return True

    def expire(self, now: float) -> list[int]:
        """Ends every lease past its deadline (deleting its keys); returns their ids."""
        ended = [lease for lease, held in self._leases.items() if held.deadline <= now]
        for lease in ended:
            self.revoke(lease)
        return ended

    def holds(self, lease: int) -> bool:
        return lease in self._leases

    def next_deadline(self) -> float | None:
        return min((held.deadline for held in self._leases.values()), default=None)

    # -- watches

    def events_since(self, revision: int, key: bytes, range_end: bytes) -> list[Event] | None:
        """Changes at ``revision`` or later to keys in [key, range_end); None when some of
        them are no longer kept (the watcher must read again)."""
        if revision <= self.compacted:
            return None
        found = []
        for event in reversed(self._events):
            if event.revision < revision:
                break
            if _within(event.key, key, range_end):
                found.append(event)
        found.reverse()
        return found


def _within(candidate: bytes, key: bytes, range_end: bytes) -> bool:
    if not range_end:
        return candidate == key
    return candidate >= key and (range_end == b"\0" or candidate < range_end)
