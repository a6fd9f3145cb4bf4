"""One client connection: read frames, run handlers, answer in request order.

The reader admits requests one at a time (an ordered handler such as Produce
is admitted once its offsets are assigned, so one connection's appends keep
their order) and may read ahead up to ``max_inflight_requests``; the writer
sends each response as soon as it and all earlier ones are ready. Both live in
the connection's own nursery; a protocol violation closes the connection and
nothing else.
"""

from __future__ import annotations

import logging
import socket
import time

import trio

from kafscale.protocol.api_versions import ApiKey
from kafscale.protocol.errors import ErrorCode, KafkaError, MalformedFrame, ProtocolError, UnsupportedVersion
from kafscale.protocol.framing import FrameDecoder, encode_frame
from kafscale.protocol.messages import Request, RequestHeader, decode_request, encode_response, peek_header

from .budget import ByteBudget
from .context import GatewayContext, current_peer
from .handlers import REGISTRY, Handler
from .handlers.api_versions import unsupported_version_response

__all__ = ["Connection"]

log = logging.getLogger("kafscale.connection")

_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _Slot:
    __slots__ = ("size", "payload", "done", "close_after")

    def __init__(self, size: int) -> None:
        self.size = size
        self.payload: bytes | None = None
        self.done = trio.Event()
        self.close_after = False


class Connection:
    def __init__(self, ctx: GatewayContext, stream: trio.abc.Stream, budget: ByteBudget, peer: str) -> None:
        self.ctx = ctx
        self.stream = stream
        self.budget = budget
        self.peer = peer
        self.reader_scope = trio.CancelScope()

    def stop_reading(self) -> None:
        """Graceful shutdown: answer what was read, read nothing more."""
        self.reader_scope.cancel()

    async def serve(self) -> None:
        send_slots, receive_slots = trio.open_memory_channel[_Slot](self.ctx.config.max_inflight_requests)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, receive_slots, nursery.cancel_scope)
                async with send_slots:
                    with self.reader_scope:
                        await self._read(send_slots, nursery)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _read(self, send_slots, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder(self.ctx.config.max_frame_bytes)
        while True:
            try:
                frame = decoder.next_frame()
            except ProtocolError as exc:
                self._violation(exc)
                return
            if frame is None:
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the client reset or closed the connection
                if not data:
                    return
                self._ack_now()
                decoder.feed(data)
                continue
            size = await self.budget.acquire(len(frame))
            slot = _Slot(size)
            try:
                request = decode_request(frame)
            except UnsupportedVersion as exc:
                if exc.api_key == ApiKey.API_VERSIONS:
                    # Answer in v0 so the client can retry at a version we serve.
                    header = peek_header(frame)
                    slot.payload = encode_response(RequestHeader(18, 0, header.correlation_id),
                                                   unsupported_version_response(exc.api_version))
                    slot.done.set()
                    await send_slots.send(slot)
                    continue
                self.budget.release(size)
                self._violation(exc)
                return
            except MalformedFrame as exc:
                self.budget.release(size)
                self._violation(exc)
                return
            handler = REGISTRY.get(request.header.api_key)
            if handler is None:
                self.budget.release(size)
                self._violation(UnsupportedVersion(request.header.api_key, request.header.api_version))
                return
            await send_slots.send(slot)
            await nursery.start(self._handle, handler, request, slot)

    def _ack_now(self) -> None:
        """ACK what we just read instead of delaying it until the response.

        Clients with Nagle's algorithm on (librdkafka's default) hold a small request
        back until the previous one is ACKed; with delayed ACKs that serialises a
        connection's requests behind each flush, defeating group commit.
        """
        if _TCP_QUICKACK is not None and isinstance(self.stream, trio.SocketStream):
            try:
                self.stream.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
            except OSError:
                pass

    def _violation(self, exc: Exception) -> None:
        self.ctx.metrics.protocol_errors.inc()
        log.warning("closing connection from %s: %s", self.peer, exc)

    async def _handle(self, handler: Handler, request: Request, slot: _Slot, task_status=trio.TASK_STATUS_IGNORED):
        admitted_flag = False

        def admitted() -> None:
            nonlocal admitted_flag
            if not admitted_flag:
                admitted_flag = True
                task_status.started()

        api = handler.api_key.name
        current_peer.set(self.peer.rsplit(":", 1)[0])
        self.ctx.metrics.requests.labels(api, str(request.header.api_version)).inc()
        started = time.perf_counter()
        if not handler.ordered:
            admitted()
        try:
            timeout = handler.timeout(request) if handler.timeout else self.ctx.config.request_timeout_ms / 1000
            with trio.fail_after(timeout + 1):
                if handler.ordered:
                    body = await handler.handle(self.ctx, request, admitted)
                else:
                    body = await handler.handle(self.ctx, request)
        except trio.TooSlowError:
            body = handler.error(request, ErrorCode.request_timed_out)
        except KafkaError as exc:
            body = handler.error(request, exc.code)
        except Exception:
            log.exception("%s v%d from %s failed", api, request.header.api_version, self.peer)
            self.ctx.metrics.request_errors.labels(api).inc()
            body = handler.error(request, ErrorCode.unknown_server_error)
        finally:
            admitted()
        try:
            slot.payload = None if body is None else encode_response(request.header, body)
        except Exception:
            log.exception("encoding the %s response for %s failed; closing", api, self.peer)
            slot.close_after = True
        self.ctx.metrics.request_seconds.labels(api).observe(time.perf_counter() - started)
        slot.done.set()

    async def _write(self, receive_slots, scope: trio.CancelScope) -> None:
        async with receive_slots:
            async for slot in receive_slots:
                await slot.done.wait()
                try:
                    if slot.close_after:
                        scope.cancel()
                        return
                    if slot.payload is not None:
                        await self.stream.send_all(encode_frame(slot.payload))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    scope.cancel()
                    return
                finally:
                    self.budget.release(slot.size)
