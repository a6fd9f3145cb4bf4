"""Handlers called directly: request contexts from the real wiring on ``memory://``.

No socket, frame or connection: a test names the API, version and body, and gets the
handler's answer as the gateway would encode it. The gateway behind it is the one
``kafscale-gateway`` builds (``wiring.assemble``: its stores, logs, coordinators and
background work), with the clock the test gives it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from kafscale.gateway.budget import ByteBudget, RequestMemory
from kafscale.gateway.clock import Clock
from kafscale.gateway.config import GatewayConfig, Listener
from kafscale.gateway.context import RequestContext
from kafscale.gateway.handlers import REGISTRY
from kafscale.gateway.security.session import ANONYMOUS, Session
from kafscale.gateway.wire import frame_response
from kafscale.gateway.wiring import Gateway, assemble, open_storage
from kafscale.protocol.messages import Request, RequestHeader, decode_response

__all__ = ["DirectGateway", "direct_gateway"]

_LISTENER = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)


class DirectGateway:
    """A wired gateway whose handlers a test calls itself."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._budget = ByteBudget(gateway.config.limits.max_inflight_bytes)
        self._correlation = 0

    def context(self, principal: str = ANONYMOUS, deadline: float = math.inf) -> RequestContext:
        """A request's context as a connection of ``principal`` would build it."""
        account = self._budget.connection(self.gateway.config.limits.connection_inflight_bytes)
        return RequestContext(self.gateway.context, Session.start(_LISTENER, "127.0.0.1", principal),
                              RequestMemory(account, 0), deadline)

    async def call(self, api_key: int, version: int, body: Any, principal: str = ANONYMOUS) -> Any:
        """The answer as a client decodes it (kio's response), once complete: encoded and
        framed by the wire, then decoded."""
        self._correlation += 1
        handler = REGISTRY[api_key]
        request = Request(RequestHeader(api_key, version, self._correlation, "direct"), body)
        with trio.fail_after(30):
            answer = await handler.handle(self.context(principal), request)
            if handler.ordered:  # a Completion: the answer once its effects are done (a Produce's flush)
                answer = await answer.answer(trio.current_time() + 30)
        frame = b"".join(bytes(piece) for piece in frame_response(request.header, answer))
        return decode_response(api_key, version, frame[4:])[1]


@asynccontextmanager
async def direct_gateway(clock: Clock | None = None, **options: Any) -> AsyncIterator[DirectGateway]:
    """A gateway on ``memory://`` built by the real wiring, running, with ``clock``."""
    config = GatewayConfig.of(**{"storage": "memory://", "port": 9092, "http_port": -1, **options})
    _, store = await open_storage(config)
    async with assemble(config, store, (("PLAINTEXT", "127.0.0.1", 9092),), clock or Clock()) as gateway:
        await gateway.start()
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            gateway.context.ready = True
            try:
                yield DirectGateway(gateway)
            finally:
                await gateway.flush()
                nursery.cancel_scope.cancel()
