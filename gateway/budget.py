"""A byte budget shared by all connections: request bytes in flight are bounded."""

from __future__ import annotations

import trio

__all__ = ["ByteBudget"]


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._lot = trio.lowlevel.ParkingLot()

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes fit; returns what was taken (a frame larger than
        the whole budget takes all of it, so it can still proceed alone)."""
        size = min(size, self.capacity)
        while self.used + size > self.capacity:
            await self._lot.park()
        self.used += size
        return size

    def release(self, size: int) -> None:
        self.used -= size
        self._lot.unpark_all()
