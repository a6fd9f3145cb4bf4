"""Memory held for clients: request frames (from their size prefix on) and responses
until sent, bounded across all connections and per connection.

Each connection draws on the shared :class:`ByteBudget` through its own
:class:`ConnectionBudget`, which knows everything that connection holds, so
closing it returns every byte whatever ended the connection (reset, timeout,
cancellation, a handler error). A connection may not hold more than its share
while it holds anything, so one client that never reads stalls itself, not
the others. And a quarter of the budget is kept for small requests (up to
1 MiB, nearly every request a client sends): large frames and answers never
take it, so clients that announce huge frames and stall, or hoard large
answers, cannot starve ordinary traffic while they wait to be timed out.
"""

from __future__ import annotations

import trio

__all__ = ["ByteBudget", "ConnectionBudget", "RequestMemory"]


SMALL_REQUEST = 1 << 20


class ByteBudget:
    def __init__(self, capacity: int, small_request: int = SMALL_REQUEST) -> None:
        self.capacity = capacity
        self.reserve = capacity // 4  # only requests up to ``small_request`` may use this part
        self.small_request = small_request
        self.used = 0
        self._lot = trio.lowlevel.ParkingLot()

    def limit_for(self, size: int) -> int:
        """How full the budget may be after taking ``size`` (for a frame of that size)."""
        return self.capacity if size <= self.small_request else self.capacity - self.reserve

    @property
    def free_for_large(self) -> int:
        return max(self.capacity - self.reserve - self.used, 0)

    def connection(self, share: int) -> ConnectionBudget:
        return ConnectionBudget(self, share)

    def _release(self, size: int) -> None:
        self.used -= size
        self._lot.unpark_all()


class ConnectionBudget:
    """One connection's account; :meth:`close` gives back whatever it still holds."""

    def __init__(self, budget: ByteBudget, share: int) -> None:
        self._budget = budget
        self.share = share
        self.held = 0
        self.closed = False

    def _fits(self, size: int) -> bool:
        budget = self._budget
        within_share = self.held == 0 or self.held + size <= self.share
        return within_share and budget.used + size <= budget.limit_for(size)

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` more bytes fit; returns what was taken. A frame larger than
        all a large frame may use takes all of that, so it can still proceed alone."""
        budget = self._budget
        size = min(size, budget.capacity - budget.reserve) if size > budget.small_request else size
        while not self._fits(size):
            await self._budget._lot.park()
        self._take(size)
        return size

    def available(self) -> int:
        """Bytes this connection could still be charged for a large answer."""
        return max(min(self._budget.free_for_large, self.share - self.held), 0)

    def available_alone(self) -> int:
        """Bytes a connection holding one request could be charged: the large-answer budget."""
        return self._budget.free_for_large

    def charge(self, size: int) -> None:
        """Account for bytes already in memory (a response being built or sent); may go
        over the budget, which then holds back new requests until it is sent."""
        self._take(size)

    def _take(self, size: int) -> None:
        if self.closed:  # a handler still finishing after its connection ended
            return
        self.held += size
        self._budget.used += size

    def release(self, size: int) -> None:
        size = min(size, self.held)
        self.held -= size
        self._budget._release(size)

    def close(self) -> None:
        self.release(self.held)
        self.closed = True


class RequestMemory:
    """What one request holds: its frame and whatever its handler charged for the
    response. Handlers that build large answers (Fetch) size them by :meth:`available`."""

    __slots__ = ("account", "frame", "size")

    def __init__(self, account: ConnectionBudget, frame: int) -> None:
        self.account = account
        self.frame = frame  # the request's own bytes
        self.size = frame  # the frame plus the response charges

    def available(self) -> int:
        """What this request may still charge: within its connection's share, or, when the
        connection holds nothing but this request, all that large answers may use (as a lone
        large frame may): an answer whose first batch is larger than the share (a topic's
        max.message.bytes above connection_inflight_bytes) is served alone, never stalled."""
        if self.account.held <= self.size:
            return self.account.available_alone()
        return self.account.available()

    def charge(self, size: int) -> None:
        self.account.charge(size)
        self.size += size

    def refund(self, size: int) -> None:
        size = min(size, self.size)
        self.account.release(size)
        self.size -= size

    def settle(self, response: int) -> None:
        """The encoded response replaces whatever the handler charged while building it."""
        change = self.frame + response - self.size
        if change > 0:
            self.charge(change)
        else:
            self.refund(-change)

    def release(self) -> None:
        self.account.release(self.size)
        self.size = 0
