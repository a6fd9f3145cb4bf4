"""Where the workers' coordination store survives restarts: a file of JSON lines, one per
write (its revision and the keys it set or removed), fsynced before the write is answered.

Keys under a lease are not kept: every lease ends with the parent, so they would be gone
after a restart anyway. At open the file is read (a torn last line, from a crash mid-write,
is dropped: it was never answered) and rewritten as one snapshot line, so it holds what
is live plus what changed since.
"""

from __future__ import annotations

import base64
import json
import os
from io import BufferedWriter
from pathlib import Path

from .kv import Entry

__all__ = ["Journal", "JournalUnreadable"]

REWRITE_FACTOR = 4  # rewrite once the file is this many times the live data (and over 1 MiB)


class JournalUnreadable(Exception):
    """The journal has a damaged line before its last one: not a crash mid-write."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _puts(entries: dict[bytes, Entry]) -> dict[str, list]:
    """Keys and their entries as a line holds them (a lease is never kept)."""
    return {_b64(k): [_b64(e.value), e.create_revision, e.mod_revision, e.version] for k, e in entries.items()}


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BufferedWriter | None = None
        self._size = 0
        self._live = 0
        self._kept: set[bytes] = set()  # keys the file holds: removing any other needs no line

    def load(self) -> tuple[int, dict[bytes, Entry]]:
        """The revision and the unleased keys the file holds; then the file is rewritten as
        one snapshot and kept open for appends."""
        revision, data = 0, {}
        if self.path.exists():
            lines = self.path.read_bytes().split(b"\n")
            for number, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    if number >= len(lines) - 2:  # the last line, torn by a crash mid-write
                        break
                    raise JournalUnreadable(f"{self.path}: line {number + 1} is damaged") from None
                revision = max(revision, int(record["r"]))
                for key, (value, create, mod, version) in record.get("put", {}).items():
                    data[base64.b64decode(key)] = Entry(base64.b64decode(value), create, mod, version, 0)
                for key in record.get("del", ()):
                    data.pop(base64.b64decode(key), None)
        self._rewrite(revision, data)
        return revision, data

    def append(self, revision: int, changes: dict[bytes, Entry | None]) -> None:
        kept = {k: e for k, e in changes.items() if e is not None and not e.lease}
        removed = [k for k, e in changes.items() if (e is None or e.lease) and k in self._kept]
        if not kept and not removed:
            return  # only leased keys changed: they end with the parent anyway
        self._kept.update(kept)
        self._kept.difference_update(removed)
        line = (json.dumps({"r": revision, "put": _puts(kept), "del": [_b64(k) for k in removed]},
                           separators=(",", ":")) + "\n").encode()
        assert self._file is not None, "load() opens the journal"
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._size += len(line)

    @property
    def needs_rewrite(self) -> bool:
        """Whether the file has grown well past what is live (checked before the live data is gathered)."""
        return self._size > max(2**20, REWRITE_FACTOR * self._live)

    def rewrite(self, revision: int, data: list[tuple[bytes, Entry]]) -> None:
        self._rewrite(revision, {k: e for k, e in data if not e.lease})

    def _rewrite(self, revision: int, data: dict[bytes, Entry]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        snapshot = {"r": revision, "put": _puts(data)}
        line = (json.dumps(snapshot, separators=(",", ":")) + "\n").encode()
        staged = self.path.with_name(self.path.name + ".tmp")
        with open(staged, "wb") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        if self._file is not None:
            self._file.close()
        self._file = open(self.path, "ab")
        self._size = self._live = len(line)
        self._kept = set(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
