"""A small HTTP/1.1 listener for /metrics (Prometheus), /healthz and /readyz, over TLS when
``http_ssl`` is set (with the Kafka listeners' certificate, reloaded the same way)."""

from __future__ import annotations

import logging

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kafscale.protocol.layout import META_PREFIX

from .context import GatewayContext
from .security.tls import TlsContext, TlsHandshakeFailed, tls_accept

__all__ = ["serve_http", "readiness"]

log = logging.getLogger("kafscale.http")

_STORE_ANSWER_S = 2.0


async def readiness(ctx: GatewayContext) -> tuple[bool, str]:
    """(ready, why): what /readyz answers."""
    if not ctx.ready:
        return False, "starting or stopping"
    if ctx.logs.writer.taken_over:
        return False, "a newer run of this gateway took the store over: this one writes nothing"
    if not ctx.ownership.lease_valid():
        return False, "no valid etcd lease (etcd unreachable or this gateway was paused)"
    store = ctx.logs.store
    meta = f"{ctx.config.storage.namespace}/{META_PREFIX}/"
    with trio.move_on_after(_STORE_ANSWER_S) as scope:
        try:
            await store.probe_list(meta)
        except Exception as exc:
            return False, f"object store unavailable: {exc}"
        if store.write_failure is not None:
            # Writes were failing: try one (only then, so a healthy gateway's probes cost no
            # PUTs) and stay unready until the store takes writes again.
            failure = store.write_failure
            try:
                await store.probe_write(meta + "readyz-probe")
            except Exception:
                return False, f"object store writes are failing: {failure}"
    if scope.cancelled_caught:
        return False, f"object store did not answer within {_STORE_ANSWER_S:g} s"
    damage = [ctx.logs.damage.summary()] if len(ctx.logs.damage) else []
    if ctx.groups.damaged:
        damage.append(f"{len(ctx.groups.damaged)} group(s) not served, stored state unreadable")
    # Damage is reported, not made a reason to leave service: the rest is served.
    return True, "ready" + "".join(f"; {item}" for item in damage)


async def _respond(stream: trio.SocketStream, status: str, content_type: str, body: bytes) -> None:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    await stream.send_all(head + body)


async def _handle(ctx: GatewayContext, stream: trio.SocketStream) -> None:
    try:
        with trio.move_on_after(10):
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                request += chunk
            parts = request.split(b"\r\n", 1)[0].split()
            path = parts[1].decode(errors="replace").split("?", 1)[0] if len(parts) >= 2 else ""
            if path == "/metrics":
                await _respond(stream, "200 OK", CONTENT_TYPE_LATEST, generate_latest(ctx.metrics.registry))
            elif path == "/healthz":
                await _respond(stream, "200 OK", "text/plain", b"ok\n")
            elif path == "/readyz":
                ok, reason = await readiness(ctx)
                await _respond(stream, "200 OK" if ok else "503 Service Unavailable", "text/plain",
                               reason.encode() + b"\n")
            else:
                await _respond(stream, "404 Not Found", "text/plain", b"not found\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:  # a probe must never take the gateway down
        log.exception("HTTP request failed")
    finally:
        await trio.aclose_forcefully(stream)


async def serve_http(ctx: GatewayContext, listeners, tls: TlsContext | None = None,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:
    async def handler(stream):
        if tls is not None:
            try:
                stream = await tls_accept(stream, tls, 10)
            except TlsHandshakeFailed:
                return
        await _handle(ctx, stream)

    await trio.serve_listeners(handler, listeners, task_status=task_status)
