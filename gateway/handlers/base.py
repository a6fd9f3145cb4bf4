"""The handler registry: one module per API family registers (api_key, handle, error builder).

ApiVersions is generated from this registry intersected with the protocol's
version table, so we never advertise an API we cannot answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import trio

from kafscale.protocol.api_versions import SERVED_VERSIONS, ApiKey, VersionRange
from kafscale.protocol.entities import build
from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request, response_class

from ..context import RequestContext
from ..log import PartitionLog

__all__ = ["Handler", "Completion", "Ready", "Settled", "REGISTRY", "register", "respond", "advertised_versions",
           "check_leader_epoch", "leader_hint", "wait_for_appends"]

HandleFn = Callable[..., Awaitable[Any]]
ErrorFn = Callable[[Request, ErrorCode], Any]


class Settled(Enum):
    """Whether a completion's answer can be built without awaiting anything."""

    NOW = "now"  # answer_now() builds it
    LATER = "later"  # not yet: the callback given to settle() is called when that may have changed
    BY_AWAITING = "by awaiting"  # only answer() builds it (it awaits more than flushes)


class Completion(Protocol):
    """What an ordered handler leaves once its effects are ordered: the rest of the request.
    The connection answers it when its turn comes and :meth:`settle` says it can, from
    whichever task makes it so (a Produce's, the log writer's as its flush completes);
    otherwise its writer awaits :meth:`answer`."""

    def settle(self, then: Callable[[], None]) -> Settled:
        """Whether :meth:`answer_now` can build the answer; for ``LATER``, ``then`` is called
        (once, from another task, without raising) when that may have changed."""

    def answer_now(self) -> Any:
        """The response body (``None``: nothing is sent), once :meth:`settle` said ``NOW``."""

    async def answer(self, deadline: float) -> Any:
        """The response body, by ``deadline`` (trio time): what is not done by then is
        answered as timed out."""


@dataclass(frozen=True, slots=True)
class Ready:
    """A completion whose answer is already known."""

    body: Any

    def settle(self, then: Callable[[], None]) -> Settled:
        return Settled.NOW

    def answer_now(self) -> Any:
        return self.body

    async def answer(self, deadline: float) -> Any:
        return self.body


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: ApiKey
    handle: HandleFn
    error: ErrorFn
    # Ordered handlers are run by the connection's reader, which reads the next request
    # only once ``handle`` returned: their effects are ordered then (produce offsets
    # assigned), and what is left is the :class:`Completion` it returns. Others run in a
    # task of their own and return the response body.
    ordered: bool = False
    versions: VersionRange | None = None
    # Seconds a request may take, when the API itself says (JoinGroup waits for the
    # rebalance timeout, Produce for the client's timeout within the gateway's), given the
    # gateway's request timeout; without it, the gateway's request timeout applies.
    timeout: Callable[[Request, float], float] | None = None
    # Answers that grow with the catalog (Metadata over every partition) are encoded in a
    # worker thread, so the event loop keeps serving other clients meanwhile.
    large_answers: bool = False
    # The connection closes once the error answer is sent (a failed SASL authentication).
    closes_on_error: bool = False

    @property
    def served(self) -> VersionRange:
        return self.versions or SERVED_VERSIONS[self.api_key]


REGISTRY: dict[int, Handler] = {}


def register(api_key: ApiKey, *, error: ErrorFn, ordered: bool = False, versions: VersionRange | None = None,
             timeout: Callable[[Request, float], float] | None = None, large_answers: bool = False,
             closes_on_error: bool = False):
    def decorator(function: HandleFn) -> HandleFn:
        REGISTRY[int(api_key)] = Handler(api_key, function, error, ordered, versions, timeout, large_answers,
                                         closes_on_error)
        return function

    return decorator


def respond(request: Request, values: dict[str, Any]) -> Any:
    """Build the response of the request's API and version from plain values."""
    values.setdefault("throttle_time", 0)
    return build(response_class(request.header.api_key, request.header.api_version), values)


# Advertised below what is served, as Kafka 4 does (KAFKA-18659): librdkafka before 2.10
# decides that a broker supports gzip, snappy and lz4 only if its Produce range starts at v0,
# and otherwise sends those batches uncompressed. A Produce v0-2 request itself is refused
# like any version not served (the connection is closed).
_ADVERTISED_MIN_VERSION: dict[int, int] = {ApiKey.PRODUCE: 0}


def advertised_versions() -> list[tuple[int, int, int]]:
    return sorted(
        (int(key), _ADVERTISED_MIN_VERSION.get(key, handler.served.min_version), handler.served.max_version)
        for key, handler in REGISTRY.items()
    )


def check_leader_epoch(partition_epoch: int, current_leader_epoch: int | None) -> None:
    """As Kafka's leader does for Fetch, ListOffsets and OffsetForLeaderEpoch: a client that
    names an epoch (not -1) must name this one, so one with stale metadata refreshes it."""
    if current_leader_epoch is None or current_leader_epoch < 0:
        return
    if current_leader_epoch < partition_epoch:
        raise KafkaError(ErrorCode.fenced_leader_epoch,
                         f"epoch {current_leader_epoch} is older than the leader's {partition_epoch}")
    if current_leader_epoch > partition_epoch:
        raise KafkaError(ErrorCode.unknown_leader_epoch,
                         f"epoch {current_leader_epoch} is newer than the leader's {partition_epoch}")


def leader_hint(ctx: RequestContext, topic: str, partition: int) -> tuple[dict, list[dict]]:
    """KIP-951 (Produce v10+, Fetch v16+): with NOT_LEADER_OR_FOLLOWER, the partition's
    current leader and its endpoint, so the client goes there without a Metadata round."""
    leader = ctx.ownership.leader(topic, partition)
    if leader is None:
        return dict(leader_id=-1, leader_epoch=-1), []
    node_id, epoch = leader
    endpoints = [endpoint for endpoint in ctx.brokers() if endpoint["node_id"] == node_id]
    return dict(leader_id=node_id, leader_epoch=epoch), endpoints


async def wait_for_appends(logs: Iterable[PartitionLog], woken: trio.Event, deadline: float) -> None:
    """A long poll's wait: until one of ``logs`` is appended to, ``woken`` is set by
    someone else, or ``deadline`` (trio time)."""
    logs = list(logs)
    for partition_log in logs:
        partition_log.add_waiter(woken)
    try:
        with trio.move_on_at(deadline):
            await woken.wait()
    finally:
        for partition_log in logs:
            partition_log.remove_waiter(woken)
