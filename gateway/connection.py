"""One client connection: read frames, run handlers, answer in request order.

The reader starts a task per request, except for an ordered handler such as
Produce, which it runs itself up to the point where its effects are ordered
(offsets assigned, so one connection's appends keep their order); it may read
ahead up to ``max_inflight_requests``. The writer sends each response as soon
as it and all earlier ones are ready, and finishes an ordered request itself
when its turn comes (a Produce's answer once its flush is done): a Produce
costs no task of its own. Both live in the connection's own nursery; a protocol
violation closes the connection and nothing else.

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
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from itertools import islice
from typing import TypeVar

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.messages import Request
from kafscale.protocol.response_fields import Buffer

from .budget import ByteBudget, RequestMemory
from .context import GatewayContext, RequestContext
from .failures import FAILURES, code_of
from .handlers import Handler
from .handlers.base import Completion, Ready
from .log_limits import PerSourceLog
from .security.session import Session
from .wire import Answer, KafkaWire, RawToken, Violation, frame_response, frame_token

__all__ = ["Connection"]

log = logging.getLogger("kafscale.connection")

_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only
_SEND_CHUNK = 1 << 20  # under TLS a response goes out in pieces this large, each under the stall timeout
_IOV_MAX = 1024  # buffers one sendmsg may take (Linux's UIO_MAXIOV)
_DIRECT_MIN = 64 * 1024  # smaller frames come buffered, several per receive
RECEIVE_BUFFER_BYTES = 64 * 1024  # what one read of a plain TCP socket takes when no large body is pending
_YIELD_BYTES = 1 << 20  # the reader lets other tasks run at least once per this much read
T = TypeVar("T")


class _Ordered:
    """An ordered request, run by the reader until its effects were ordered; the writer
    finishes it."""

    __slots__ = ("handler", "request", "completion", "deadline", "started", "timed")

    def __init__(self, handler: Handler, request: Request, completion: Completion, deadline: float,
                 started: float, timed) -> None:
        self.handler, self.request, self.completion = handler, request, completion
        self.deadline, self.started, self.timed = deadline, started, timed


class _Slot:
    """A request's place in the order of answers."""

    __slots__ = ("memory", "payload", "done", "close_after", "ordered")

    def __init__(self, memory: RequestMemory) -> None:
        self.memory = memory
        self.payload: list[Buffer] | None = None  # the answer's frame, in pieces sent in order
        self.done = trio.Event()  # set when a task's answer is ready (the writer finishes an ordered one)
        self.close_after = False
        self.ordered: _Ordered | None = None


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
        self.unanswered = 0  # requests read and not yet answered (0: the connection is idle)
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
        send_slots, receive_slots = trio.open_memory_channel[_Slot](self.ctx.config.limits.max_inflight_requests)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch)
                nursery.start_soon(self._write, receive_slots, nursery.cancel_scope)
                async with send_slots:
                    with self.reader_scope:
                        await self._read(send_slots, nursery)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away
        except* _Closing as group:
            log.info("closing connection from %s: %s", self.peer, group.exceptions[0])
        finally:
            self.account.close()  # every byte this connection held, wherever it stopped
            self.unauthenticated_account.close()
            await trio.aclose_forcefully(self.stream)

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
        """Closes the connection when the client is late while the reader waits for it: a
        started request not complete by its deadline, or a connection idle (nothing
        unanswered) for ``connections_max_idle_ms``. It wakes at the next moment either could
        happen, and at least once per idle or stall period (a deadline set meanwhile is
        never further away than that)."""
        limits = self.ctx.config.limits
        idle, stall = limits.connections_max_idle_ms / 1000, limits.connection_stall_ms / 1000
        while True:
            now = trio.current_time()
            if now >= self._request_deadline and self._waiting_since != math.inf:
                raise _Closing(f"a request not complete {limits.connection_stall_ms} ms after it started")
            if now >= self._waiting_since + idle:
                if self.unanswered == 0:
                    raise _Closing(f"idle for {limits.connections_max_idle_ms} ms")
                self._waiting_since = now  # a long poll is not idle: another period
            await trio.sleep_until(min(self._request_deadline, self._waiting_since + idle, now + min(idle, stall)))

    async def _read(self, send_slots, nursery: trio.Nursery) -> None:
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
            slot = _Slot(memory)
            event = wire.event_for(frame, trio.current_time())
            del frame
            if isinstance(event, Violation):
                self._violation(event.reason)
                return
            if isinstance(event, RawToken):
                await self._raw_token(event.token, slot, send_slots)
                if self.session.closing:
                    return
                continue
            if isinstance(event, Answer):
                slot.payload = event.frame
                slot.memory.settle(sum(len(piece) for piece in event.frame))
                slot.done.set()
                await self._queue(send_slots, slot)
                continue
            if not event.handler.ordered:
                await self._queue(send_slots, slot)
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
            slot.ordered = await self._admit(event.handler, event.request, slot.memory)
            await self._queue(send_slots, slot)
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

    async def _raw_token(self, token: bytes, slot: _Slot, send_slots) -> None:
        """A SASL token after SaslHandshake v0: answered with the bare server token; a
        failure closes the connection without an answer (as Kafka does for v0)."""
        try:
            answer, _ = await self.ctx.access.authenticate(self.session, token)
        except KafkaError:  # the authenticator failed the session
            slot.memory.release()
            return
        slot.payload = frame_token(answer)
        slot.memory.settle(4 + len(answer))
        slot.done.set()
        await self._queue(send_slots, slot)

    async def _queue(self, send_slots, slot: _Slot) -> None:
        """The slot to the writer, in request order. Without a trip through the scheduler while
        the writer has room: the reader goes on with what the client sent, the writer answers
        it once the reader waits (at most ``max_inflight_requests`` queued meanwhile)."""
        self.unanswered += 1
        try:
            send_slots.send_nowait(slot)
        except trio.WouldBlock:
            await send_slots.send(slot)

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

    async def _admit(self, handler: Handler, request: Request, memory: RequestMemory) -> _Ordered:
        """An ordered request run until its effects are ordered; what is left, for the writer.
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
        return _Ordered(handler, request, completion, deadline, started, timed)

    async def _complete(self, slot: _Slot, ordered: _Ordered) -> None:
        """The writer's part of an ordered request: its answer, when its effects are done."""
        try:
            body = await ordered.completion.answer(ordered.deadline)
        except Exception as exc:
            body = self._failure(ordered.handler, ordered.request, exc)
        await self._encode(slot, ordered.handler, ordered.request, body)
        ordered.timed.observe(time.perf_counter() - ordered.started)

    async def _handle(self, handler: Handler, request: Request, slot: _Slot, running: trio.Event) -> None:
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
            await self._encode(slot, handler, request, body)
            timed.observe(time.perf_counter() - started)
        finally:
            # Even when cancelled (at the end of the grace period), or the writer would wait
            # for this answer.
            slot.done.set()

    async def _encode(self, slot: _Slot, handler: Handler, request: Request, body) -> None:
        """The slot's payload: ``body`` encoded (nothing for ``None``), its memory settled."""
        try:
            if body is None:
                slot.payload = None
            elif handler.large_answers:
                slot.payload = await trio.to_thread.run_sync(frame_response, request.header, body)
            else:
                slot.payload = frame_response(request.header, body)
            del body
            if slot.payload is not None:
                slot.memory.settle(sum(len(piece) for piece in slot.payload))
        except Exception:
            api = handler.api_key.name
            log.exception("encoding the %s response for %s failed; closing", api, self.peer)
            self.ctx.metrics.request_errors.labels(api).inc()
            slot.close_after = True

    async def _write(self, receive_slots, scope: trio.CancelScope) -> None:
        async with receive_slots:
            while (slot := await _next_slot(receive_slots)) is not None:
                try:
                    if slot.ordered is not None:
                        await self._complete(slot, slot.ordered)
                    else:
                        await slot.done.wait()
                    if slot.close_after:
                        scope.cancel()
                        return
                    if slot.payload is not None:
                        await self._send(slot.payload)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    scope.cancel()
                    return
                finally:
                    slot.payload = None
                    slot.memory.release()
                    self.unanswered -= 1
        scope.cancel()  # the reader is done and all it read is answered: the watchdog ends too

    async def _send(self, frame: list[Buffer]) -> None:
        """Send one response frame (stored batches are not copied on plain TCP). Each send
        must make progress within the stall timeout, so a client that stops reading is found
        out."""
        if self._socket is None:  # TLS encrypts what it is given anyway: a few large sends
            for chunk in _chunks(frame, _SEND_CHUNK):
                await self._within_stall(self.stream.send_all(chunk))
            return
        # Written to the socket at once (an answer usually fits its send buffer); the loop is
        # waited on only when the client's window is full. writev is sendmsg without its
        # flags, and a trio socket's sendmsg would add two scheduler trips per answer.
        unsent = deque(memoryview(piece) for piece in frame if len(piece))  # writev of nothing writes 0
        while unsent:
            try:
                sent = os.writev(self._fd, list(islice(unsent, _IOV_MAX)))
            except BlockingIOError:
                await self._within_stall(trio.lowlevel.wait_writable(self._socket))
                continue
            except OSError as exc:
                raise trio.BrokenResourceError from exc  # the client reset the connection
            while sent:
                head = unsent[0]
                if len(head) > sent:
                    unsent[0] = head[sent:]
                    break
                sent -= len(head)
                unsent.popleft()

    async def _within_stall(self, sending: Awaitable[T]) -> T:
        """``sending``'s result, if it makes progress within the stall timeout."""
        stall_ms = self.ctx.config.limits.connection_stall_ms
        with trio.CancelScope(deadline=trio.current_time() + stall_ms / 1000):
            return await sending
        raise _Closing(f"the client took none of a response for {stall_ms} ms")


async def _next_slot(receive_slots) -> _Slot | None:
    """The next slot to answer (``None`` once the reader is done): one waiting already is
    taken without a trip through the scheduler (the writer answers at most
    ``max_inflight_requests`` before the reader runs again)."""
    try:
        return receive_slots.receive_nowait()
    except trio.WouldBlock:
        try:
            return await receive_slots.receive()
        except trio.EndOfChannel:
            return None
    except trio.EndOfChannel:
        return None


def _chunks(pieces: list[Buffer], size: int) -> Iterator[Buffer]:
    """``pieces`` regrouped into buffers of at most ``size`` bytes: small ones joined,
    large ones sliced."""
    gathered = bytearray()
    for piece in pieces:
        view = memoryview(piece)
        if len(gathered) + len(view) <= size:
            gathered += view
            continue
        if gathered:
            yield bytes(gathered)
            gathered.clear()
        for start in range(0, len(view), size):
            part = view[start:start + size]
            if len(part) == size:
                yield part
            else:
                gathered += part
    if gathered:
        yield bytes(gathered)
