"""The stored-log readers (:mod:`kafscale.protocol.stored_log`) driven on trio: each step's
reads run concurrently, a bounded number at a time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from kafscale.protocol.log_view import StoredSegment
from kafscale.protocol.stored_log import MISSING, ListObjects, Read, Reader, ReadObject, ReadRange
from kafscale.storage_backends import ObjectNotFound

from ..storage import AsyncStore

__all__ = ["read_stored", "skip_torn", "Repair"]

T = TypeVar("T")
Repair = Callable[[list[tuple[int, str]]], Awaitable[list[StoredSegment]]]

_READS_IN_FLIGHT = 16


async def skip_torn(torn: list[tuple[int, str]]) -> list[StoredSegment]:
    """What a reader that does not own the partition does with torn segments: nothing (they
    were never acknowledged; the owner repairs them)."""
    return []


async def read_stored(store: AsyncStore, reader: Reader[T], repair: Repair = skip_torn) -> T:
    """Run ``reader`` against ``store``: its result, or the exception it raised."""
    answers: list[Any] | None = None
    while True:
        try:
            step = reader.send(answers)  # type: ignore[arg-type]  # None starts a generator
        except StopIteration as done:
            return done.value
        answers = await _perform(store, step, repair)


async def _perform(store: AsyncStore, step: list[Read], repair: Repair) -> list[Any]:
    answers: list[Any] = [None] * len(step)
    limiter = trio.CapacityLimiter(_READS_IN_FLIGHT)

    async def one(index: int, request: Read) -> None:
        async with limiter:
            if isinstance(request, ListObjects):
                answers[index] = [(info.key, info.size) for info in await store.list(request.prefix)]
            elif isinstance(request, ReadRange):
                try:
                    get_range = store.get_range_view if request.view else store.get_range
                    answers[index] = await get_range(request.key, request.start, request.end)
                except ObjectNotFound:
                    answers[index] = MISSING
            elif isinstance(request, ReadObject):
                try:
                    answers[index] = await store.get(request.key)
                except ObjectNotFound:
                    answers[index] = MISSING
            else:
                answers[index] = await repair(list(request.torn))

    if len(step) == 1:  # most steps: no nursery needed
        await one(0, step[0])
    else:
        async with trio.open_nursery() as nursery:
            for index, request in enumerate(step):
                nursery.start_soon(one, index, request)
    return answers
