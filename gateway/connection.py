"""One client connection: read frames, run handlers, answer in request order.

The reader starts a task per request, except for an ordered handler such as
Produce, which it runs itself up to the point where its effects are ordered
(offsets assigned, so one connection's appends keep their order); it may read
ahead up to ``max_inflight_requests``. Each answer is sent as soon as it and all
earlier ones are ready, from the task that made it ready (:mod:`.answers`): a
Produce costs no task of its own, and its answer goes out as the log writer
completes its flush. The reader, the answers' writer task and a watchdog live in
the connection's own nursery; a protocol violation closes the connection and
nothing else.

Memory: a frame's bytes are reserved from the connection's budget as soon as
its size prefix is read, before the body is buffered; responses are charged
until sent. Whatever ends the connection, its budget account is closed and
every byte returns. A connection idle past ``connections_max_idle_ms``, or
stalled mid-request or mid-response past ``connection_stall_ms``, is closed.

Before authentication on a SASL listener, frames are capped at
``sasl_max_receive_bytes`` (Kafka's 512 KiB) and charged, once their body starts
arriving (an announced size alone costs nothing), to a pool of their own
(``unauthenticated_inflight_bytes``): clients that never log in cannot take the
memory authenticated ones use.

What each frame means (the authentication gate, the ApiVersions fallback, raw
SASL tokens) is decided sans-io by :class:`~.wire.KafkaWire`; this module does the
trio part: sockets, tasks, budgets, deadlines. A failed authentication is
answered, then the connection closes.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request

from .answers import Answers, Ordered, Slot, Stalled
from .budget import ByteBudget, RequestMemory
from .context import GatewayContext, RequestContext
from .failures import FAILURES, code_of
from .handlers import Handler
from .handlers.base import Completion, Ready
from .log_limits import PerSourceLog
from .security.session import Session
from .wire import Answer, KafkaWire, RawToken, Violation, frame_token

__all__ = ["Connection"]

log = logging.getLogger("kafscale.connection")

_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only
_DIRECT_MIN = 64 * 1024  # smaller frames come buffered, several per receive
RECEIVE_BUFFER_BYTES = 64 * 1024  # what one read of a plain TCP socket takes when no large body is pending
_YIELD_BYTES = 1 << 20  # the reader lets other tasks run at least once per this much read
T = TypeVar("T")


class _Closing(Exception):
    """The connection must close (idle, stalled); the message says why."""


class Connection:
    def __init__(self, ctx: GatewayContext, stream: trio.abc.Stream, budget: ByteBudget, peer: str,
                 session: Session, *, unauthenticated: ByteBudget, receive_buffer: memoryview,
                 violations: PerSourceLog) -> None:
        self.ctx = ctx
        self._violations = violations  # what closes connections, logged per client address at most once a minute
        self.stream = stream
        self.session = session
        self.account = budget.connection(ctx.config.limits.connection_inflight_bytes)
        # What this connection holds before it authenticated: one capped frame and its answer.
        self.unauthenticated_account = unauthenticated.connection(ctx.config.limits.sasl_max_receive_bytes + 2 * 65536)
        self.peer = peer
        self.reader_scope = trio.CancelScope()
        self._watch_sleep = trio.CancelScope()  # the watchdog's current sleep (its deadline: when it wakes)
        limits = ctx.config.limits
        self.answers = Answers(stream, limits.max_inflight_requests, limits.connection_stall_ms, self._failure,
                               ctx.metrics, peer, self._answer_due)
        # The socket under a plain TCP stream, which large request bodies are received from directly.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._fd = self._socket.fileno() if self._socket is not None else -1  # closed only once serve ends
        # The TCP socket ACKed at once after each read (under TLS, the one beneath it).
        transport = getattr(stream, "transport_stream", stream)
        self._quickack = (transport.socket, _TCP_QUICKACK) if _TCP_QUICKACK is not None and isinstance(
            transport, trio.SocketStream) else None
        # Shared by the connections of this thread (idle ones hold none): a read is copied out
        # of it before the reader next waits.
        self._receive_buffer = receive_buffer
        self._unyielded = 0  # bytes read since the reader last let other tasks run
        # While the reader waits for the client (:meth:`_client_sends`): since when, and when
        # a started request must be complete (inf: not waiting, no request started).
        self._waiting_since = math.inf
        self._request_deadline = math.inf

    def stop_reading(self) -> None:
        """Graceful shutdown: answer what was read, read nothing more."""
        self.reader_scope.cancel()

    async def serve(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch)
                nursery.start_soon(self._write, nursery.cancel_scope)
                try:
                    with self.reader_scope:
                        await self._read(nursery)
                finally:
                    self.answers.finish_reading()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away
        except* (_Closing, Stalled) as group:
            log.info("closing connection from %s: %s", self.peer, group.exceptions[0])
        finally:
            self.answers.end()
            self.account.close()  # every byte this connection held, wherever it stopped
            self.unauthenticated_account.close()
            await trio.aclose_forcefully(self.stream)

    async def _write(self, scope: trio.CancelScope) -> None:
        """The answers that must wait; once all are sent (or one closes the connection), the
        connection ends, its watchdog too."""
        await self.answers.run()
        scope.cancel()

    async def _receive(self, request_deadline: float | None) -> bytes:
        """The next bytes from a TLS stream (it decrypts in chunks); b"" when the client closed
        the connection."""
        try:
            return await self._client_sends(partial(self.stream.receive_some, 65536), request_deadline)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""  # the client reset or closed the connection

    async def _receive_into(self, view: memoryview, request_deadline: float | None) -> int:
        """Bytes received into ``view`` (0: the client closed the connection) from a plain TCP
        stream's socket. What the client has sent is read at once: no trip through the
        scheduler, no cancel scope; the loop is waited on only when nothing has arrived."""
        assert self._socket is not None
        while True:
            try:
                count = os.readv(self._fd, (view,))
            except BlockingIOError:
                await self._client_sends(partial(trio.lowlevel.wait_readable, self._socket), request_deadline)
                continue
            except OSError:
                return 0  # the client reset the connection
            return count

    async def _client_sends(self, waiting: Callable[[], Awaitable[T]], request_deadline: float | None) -> T:
        """``waiting()``'s result, which waits for the client. A started request must be
        complete by ``request_deadline``; between requests the connection may stay idle for
        ``connections_max_idle_ms`` while nothing of it is unanswered. :meth:`_watch` holds
        the reader to that: a wait costs no cancel scope of its own."""
        self._waiting_since = trio.current_time()
        self._request_deadline = math.inf if request_deadline is None else request_deadline
        try:
            return await waiting()
        finally:
            self._waiting_since = math.inf

    async def _watch(self) -> None:
        """Holds the client and the answers to their deadlines: closes the connection when
        the client is late while the reader waits for it (a started request not complete by
        its deadline, or the connection idle, nothing unanswered, for
        ``connections_max_idle_ms``), and hands an answer not ready by its deadline to the
        writer task, which answers it as timed out. It sleeps until the next moment one of
        them could happen, and at most an idle or stall period (a request deadline set
        meanwhile is never further away than that; an answer's earlier one wakes it)."""
        limits = self.ctx.config.limits
        idle, stall = limits.connections_max_idle_ms / 1000, limits.connection_stall_ms / 1000
        while True:
            now = trio.current_time()
            if now >= self._request_deadline and self._waiting_since != math.inf:
                raise _Closing(f"a request not complete {limits.connection_stall_ms} ms after it started")
            if now >= self._waiting_since + idle:
                if self.answers.unanswered == 0:
                    raise _Closing(f"idle for {limits.connections_max_idle_ms} ms")
                self._waiting_since = now  # a long poll is not idle: another period
            if now >= self.answers.head_deadline():
                self.answers.overdue()
            wake_at = min(self._request_deadline, self._waiting_since + idle, self.answers.head_deadline(),
                          now + min(idle, stall))
            with trio.CancelScope(deadline=wake_at) as self._watch_sleep:
                await trio.sleep_forever()

    def _answer_due(self, deadline: float) -> None:
        """The answer at the head must be ready by ``deadline``: the watchdog wakes by then."""
        if deadline < self._watch_sleep.deadline:
            self._watch_sleep.deadline = deadline

    async def _read(self, nursery: trio.Nursery) -> None:
        config = self.ctx.config
        wire = KafkaWire(self.session, config.limits.max_frame_bytes, config.limits.sasl_max_receive_bytes)
        while True:
            assembled = await self._assemble(wire)
            if assembled is None:
                return  # the client closed the connection
            if isinstance(assembled, Violation):
                self._violation(assembled.reason)
                return
            frame, memory = assembled
            event = wire.event_for(frame, trio.current_time())
            del frame
            if isinstance(event, Violation):
                self._violation(event.reason)
                return
            if isinstance(event, RawToken):
                await self._raw_token(event.token, Slot(memory))
                if self.session.closing:
                    return
                continue
            if isinstance(event, Answer):
                slot = Slot(memory)
                slot.payload = event.frame
                slot.memory.settle(sum(len(piece) for piece in event.frame))
                slot.ready = True
                await self.answers.queue(slot)
                continue
            if not event.handler.ordered:
                slot = Slot(memory)
                await self.answers.queue(slot)
                # The next request is read once this one's task has started: what a handler does
                # before its first wait (an OffsetCommit's offsets taken) follows the order of the
                # requests, as on a Kafka broker. An event, not nursery.start, which builds a
                # nursery per request.
                running = trio.Event()
                nursery.start_soon(self._handle, event.handler, event.request, slot, running)
                await running.wait()
                continue
            # Run here: the next request is read once this one's effects are ordered. Shutdown
            # may cancel it meanwhile (a delayed authentication failure): it then had no effect,
            # and is not answered.
            await self.answers.queue(Slot(memory, await self._admit(event.handler, event.request, memory)))
            if self.session.closing:
                return  # answered (authentication failed); read nothing more

    async def _assemble(self, wire: KafkaWire) -> tuple[bytearray, RequestMemory] | Violation | None:
        """The next complete frame and the memory held for it; a violation (too large, a
        negative size); ``None`` once the client closed the connection. A frame started must
        be complete within ``connection_stall_ms``."""
        authenticated = self.session.authenticated  # a login changes it between frames only
        account = self.account if authenticated else self.unauthenticated_account
        stall = self.ctx.config.limits.connection_stall_ms / 1000
        reserved = 0  # budget taken for this frame
        request_deadline: float | None = None  # when the started frame must be complete
        while True:
            frame = wire.next_frame()
            if isinstance(frame, Violation):
                return frame
            if frame is not None:
                if not reserved:
                    reserved = await account.acquire(len(frame))
                return frame, RequestMemory(account, reserved)
            # Reserve the whole frame before buffering its body: unfinished frames count
            # too, and a connection waiting for memory holds none (partial reservations
            # would let waiting connections hold all of it, none able to finish). Before
            # authentication only once the body starts arriving: an announced size alone
            # costs nothing. Time spent waiting for memory is ours, not the client's.
            if wire.pending_size is not None and not reserved and (authenticated or wire.buffered):
                reserved = await account.acquire(wire.pending_size)
                request_deadline = None
            if request_deadline is None and (wire.buffered or wire.pending_size is not None):
                request_deadline = trio.current_time() + stall
            if self._socket is None:
                data = await self._receive(request_deadline)
                if not data:
                    return None
                self._ack_now()
                wire.receive_data(data)
                continue
            # A large body whose memory is held is received straight into the frame: one copy
            # and one receive for what would be many chunks through a buffer. Anything else
            # through the receive buffer all connections share.
            body = wire.body_view() if reserved >= _DIRECT_MIN else None
            count = await self._receive_into(self._receive_buffer if body is None else body, request_deadline)
            if not count:
                return None
            self._ack_now()
            if body is None:
                wire.receive_data(self._receive_buffer[:count])
            else:
                wire.received_into(count)
            # A client that always has more to send still lets the other tasks run: each
            # request is queued for the writer (a checkpoint), and each MiB read yields.
            self._unyielded += count
            if self._unyielded >= _YIELD_BYTES:
                self._unyielded = 0
                await trio.lowlevel.checkpoint()

    async def _raw_token(self, token: bytes, slot: Slot) -> None:
        """A SASL token after SaslHandshake v0: answered with the bare server token; a
        failure closes the connection without an answer (as Kafka does for v0)."""
        try:
            answer, _ = await self.ctx.access.authenticate(self.session, token)
        except KafkaError:  # the authenticator failed the session
            slot.memory.release()
            return
        slot.payload = frame_token(answer)
        slot.memory.settle(4 + len(answer))
        slot.ready = True
        await self.answers.queue(slot)

    def _ack_now(self) -> None:
        """ACK what we just read instead of delaying it until the response.

        Clients with Nagle's algorithm on (librdkafka's default) hold a small request
        back until the previous one is ACKed; with delayed ACKs that serialises a
        connection's requests behind each flush, defeating group commit.
        """
        if self._quickack is not None:
            tcp, option = self._quickack
            try:
                tcp.setsockopt(socket.IPPROTO_TCP, option, 1)
            except OSError:
                pass

    def _failure(self, handler: Handler, request: Request, exc: Exception):
        """The error answer of a request whose handler failed."""
        api = handler.api_key.name
        if handler.closes_on_error:
            self.session.fail()
        if isinstance(exc, trio.TooSlowError):
            return handler.error(request, ErrorCode.request_timed_out)
        if isinstance(exc, FAILURES):
            if not isinstance(exc, KafkaError):  # the object store or etcd failed
                log.warning("%s v%d from %s: %s: %s", api, request.header.api_version, self.peer,
                            type(exc).__name__, exc)
            return handler.error(request, code_of(exc))
        log.error("%s v%d from %s failed", api, request.header.api_version, self.peer, exc_info=exc)
        self.ctx.metrics.request_errors.labels(api).inc()
        return handler.error(request, ErrorCode.unknown_server_error)

    def _violation(self, exc: Exception) -> None:
        self.ctx.metrics.protocol_errors.inc()
        self._violations.log(self.session.host, "closing connection from %s: %s", self.peer, exc)

    def _timeout(self, handler: Handler, request: Request) -> float:
        """Seconds the request may take."""
        limit = self.ctx.config.limits.request_timeout_ms / 1000
        return handler.timeout(request, limit) if handler.timeout else limit

    async def _admit(self, handler: Handler, request: Request, memory: RequestMemory) -> Ordered:
        """An ordered request run until its effects are ordered; what is left, for the answers.
        One deadline covers both parts. No cancel scope here: what an ordered handler does
        is usually done without awaiting anything, so it bounds what it awaits itself."""
        counted, timed = self.ctx.metrics.request_metrics(handler.api_key.name, request.header.api_version)
        counted.inc()
        started = time.perf_counter()
        deadline = trio.current_time() + self._timeout(handler, request)
        completion: Completion
        try:
            completion = await handler.handle(RequestContext(self.ctx, self.session, memory, deadline), request)
        except Exception as exc:
            completion = Ready(self._failure(handler, request, exc))
        return Ordered(handler, request, completion, deadline, started, timed)

    async def _handle(self, handler: Handler, request: Request, slot: Slot, running: trio.Event) -> None:
        """A request in a task of its own; ``running`` is set as it starts (the reader goes on
        once this task first waits)."""
        running.set()
        try:
            counted, timed = self.ctx.metrics.request_metrics(handler.api_key.name, request.header.api_version)
            counted.inc()
            started = time.perf_counter()
            try:
                # The handler's own timeout answers first (a JoinGroup's members timed out); this
                # one, a second later, only if it does not.
                deadline = trio.current_time() + self._timeout(handler, request)
                context = RequestContext(self.ctx, self.session, slot.memory, deadline)
                with trio.CancelScope(deadline=context.deadline + 1) as scope:
                    body = await handler.handle(context, request)
                if scope.cancelled_caught:
                    raise trio.TooSlowError
            except Exception as exc:
                body = self._failure(handler, request, exc)
            await self.answers.encode(slot, handler, request, body)
            timed.observe(time.perf_counter() - started)
        finally:
            if not slot.ready:  # cancelled (at the end of the grace period): answered with nothing
                self.answers.ready(slot)

