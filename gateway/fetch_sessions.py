"""Incremental fetch sessions (KIP-227): a consumer of many partitions sends only what changed.

A Fetch with session id 0 and epoch 0 asks for a session: it is answered in full, with the new
session's id. Later Fetches name the session and its next epoch and list only the partitions
whose fetch position changed (and the ones to forget); the answer lists only the partitions
with records or with a changed high watermark, last stable offset or log start, or an error.
Epoch -1 closes a session (or fetches without one). The cache is bounded by slots (Kafka's
``max.incremental.fetch.session.cache.slots``); when it is full, the least recently used
session idle for longer than ``EVICTABLE_AFTER_S`` makes room, else the client fetches without
a session, as Kafka does.

Pure: no I/O, no trio; the Fetch handler gives the time.
"""

from __future__ import annotations

import random
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from kafscale.protocol.errors import ErrorCode, KafkaError

__all__ = ["FetchSessions", "FetchSession", "SessionPartition", "PartitionKey", "INITIAL_EPOCH", "FINAL_EPOCH",
           "EVICTABLE_AFTER_S"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTABLE_AFTER_S = 120.0  # Kafka's minimum eviction time of a session in a full cache

PartitionKey = tuple[str, int]  # (topic name, partition)


@dataclass(slots=True)
class SessionPartition:
    """What the client last asked of a partition, and what it was last told of it."""

    topic_id: uuid.UUID | None
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    told: tuple[int, int, int, int] | None = None  # (high watermark, last stable, log start, error) last sent


@dataclass(eq=False)
class FetchSession:
    session_id: int
    principal: str
    epoch: int = 1  # the epoch the next Fetch of this session must carry
    partitions: OrderedDict[PartitionKey, SessionPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0

    def changed(self, key: PartitionKey, state: tuple[int, int, int, int], has_records: bool) -> bool:
        """Whether the answer must list this partition; remembers what it was told."""
        partition = self.partitions[key]
        if has_records or partition.told != state:
            partition.told = state
            return True
        return False


class FetchSessions:
    """The gateway's cache of incremental fetch sessions."""

    def __init__(self, slots: int, seed: int | None = None) -> None:
        self.slots = slots
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._random = random.Random(seed)

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, principal: str, now: float) -> FetchSession | None:
        """A new session, or ``None`` when the cache is full of sessions in use."""
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < EVICTABLE_AFTER_S:
                return None
            del self._sessions[oldest_id]
        session_id = self._random.randint(1, 2**31 - 1)
        while session_id in self._sessions:
            session_id = self._random.randint(1, 2**31 - 1)
        fetch_session = FetchSession(session_id, principal, last_used=now)
        self._sessions[session_id] = fetch_session
        return fetch_session

    def resume(self, session_id: int, epoch: int, principal: str, now: float) -> FetchSession:
        """The session a Fetch names, at the epoch it must carry (then the next); Kafka's errors otherwise."""
        fetch_session = self._sessions.get(session_id)
        if fetch_session is None or fetch_session.principal != principal:  # another principal's session is not found
            raise KafkaError(ErrorCode.fetch_session_id_not_found, f"no fetch session {session_id}")
        if epoch != fetch_session.epoch:
            raise KafkaError(ErrorCode.invalid_fetch_session_epoch,
                             f"fetch session {session_id} expects epoch {fetch_session.epoch}, not {epoch}")
        fetch_session.last_used = now
        fetch_session.epoch += 1  # the next Fetch of it must carry the next epoch
        self._sessions.move_to_end(session_id)
        return fetch_session

    def close(self, session_id: int, principal: str) -> None:
        fetch_session = self._sessions.get(session_id)
        if fetch_session is not None and fetch_session.principal == principal:
            del self._sessions[session_id]
