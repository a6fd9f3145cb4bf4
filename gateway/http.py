"""The gateway's HTTP/1.1 listener: /metrics (Prometheus), /healthz, /readyz, the status
console (/, :mod:`.console`) and the LFS endpoint (/lfs/...), over TLS when ``http_ssl`` is set (with the Kafka listeners'
certificate, reloaded the same way)."""

from __future__ import annotations

import logging

import trio
from prometheus_client import CONTENT_TYPE_LATEST

from kafscale.protocol.layout import meta_prefix

from .console import render, status
from .context import GatewayContext
from .http_auth import principal_of, require
from .http_exchange import HttpError, HttpExchange, HttpPeer
from .http_lfs import serve_lfs
from .security.acl import CLUSTER_NAME, Operation, ResourceType
from .security.tls import PrincipalMapper, TlsContext, TlsHandshakeFailed, tls_accept
from .security.tls_stream import TlsStream
from .workers.metrics import MetricsPage

__all__ = ["serve_http", "readiness"]

log = logging.getLogger("kafscale.http")

_STORE_ANSWER_S = 2.0
_HEAD_TIMEOUT_S = 10.0


async def readiness(ctx: GatewayContext) -> tuple[bool, str]:
    """(ready, why): what /readyz answers."""
    if not ctx.ready:
        return False, "starting or stopping"
    with trio.move_on_after(_STORE_ANSWER_S):
        try:
            await ctx.logs.writer.check_taken_over()
        except Exception as exc:  # the store probes below say whether it is unavailable
            log.debug("checking for a newer run failed: %s", exc)
    if ctx.logs.writer.taken_over:
        return False, "a newer run of this gateway took the store over: this one writes nothing"
    if not ctx.ownership.lease_valid():
        return False, "no valid etcd lease (etcd unreachable or this gateway was paused)"
    store = ctx.logs.store
    meta = meta_prefix(ctx.config.storage.namespace)
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
    if ctx.logs.damage.rebuilding:
        damage.append(f"rebuilding the transaction state of {', '.join(sorted(ctx.logs.damage.rebuilding))} "
                      "from the whole log (its requests wait)")
    if ctx.groups.damaged:
        damage.append(f"{len(ctx.groups.damaged)} group(s) not served, stored state unreadable")
    # Damage is reported, not made a reason to leave service: the rest is served.
    return True, "ready" + "".join(f"; {item}" for item in damage)


async def _route(ctx: GatewayContext, metrics: MetricsPage, exchange: HttpExchange) -> None:
    path = exchange.path
    if path.startswith("/lfs/"):
        await serve_lfs(ctx, exchange)
    elif exchange.method != "GET":
        raise HttpError(405, f"{exchange.method} is not served at {path}")
    elif path == "/metrics":
        await exchange.respond(200, await metrics(), CONTENT_TYPE_LATEST)
    elif path == "/healthz":
        await exchange.respond(200, b"ok\n")
    elif path == "/readyz":
        ok, reason = await readiness(ctx)
        await exchange.respond(200 if ok else 503, reason.encode() + b"\n")
    elif path == "/":
        # The console shows the whole cluster's state: what Kafka's DESCRIBE on the cluster allows.
        principal = await principal_of(ctx, exchange)
        require(ctx, exchange, principal, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        _, reason = await readiness(ctx)
        await exchange.respond(200, render(await status(ctx, reason)), "text/html; charset=utf-8")
    else:
        raise HttpError(404, "not found")


def _certificate_principal(stream: TlsStream, mapper: PrincipalMapper) -> str | None:
    """The principal of the client's certificate, as the Kafka SSL listeners map it; None without
    one (or when no rule maps it: such a client authenticates with Basic credentials)."""
    certificate = stream.getpeercert(binary_form=True)
    if not certificate:
        return None
    try:
        return mapper.principal(certificate)
    except ValueError:
        return None


async def _handle(ctx: GatewayContext, metrics: MetricsPage, stream: trio.abc.Stream, peer: HttpPeer) -> None:
    exchange = HttpExchange(stream, peer, ctx.config.network.http_idle_timeout_ms / 1000)
    try:
        # The head must come within 10 s; a body (an LFS upload) may take as long as it keeps coming.
        with trio.move_on_after(_HEAD_TIMEOUT_S):
            if not await exchange.read_head():
                return
        if not exchange.method:
            return
        try:
            await _route(ctx, metrics, exchange)
        except HttpError as exc:
            if not exchange.responded:
                await exchange.respond(exc.status, str(exc).encode() + b"\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except HttpError as exc:
        with trio.move_on_after(1):
            await exchange.respond(exc.status, str(exc).encode() + b"\n")
    except Exception:  # a probe or an upload must never take the gateway down
        log.exception("HTTP request failed")
        if not exchange.responded:
            with trio.move_on_after(1):
                await exchange.respond(500, b"internal error\n")
    finally:
        await trio.aclose_forcefully(stream)


async def serve_http(ctx: GatewayContext, listeners, metrics: MetricsPage,
                     tls: tuple[TlsContext, PrincipalMapper] | None = None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """``metrics``: what /metrics answers (this gateway's registry, or every worker's);
    ``tls``: the Kafka listeners' TLS context and certificate-principal rules (http_ssl), or
    None for plain HTTP."""

    async def handler(connection: trio.SocketStream):
        try:
            peer_host = str(connection.socket.getpeername()[0])
        except OSError:
            return
        if tls is None:
            await _handle(ctx, metrics, connection, HttpPeer(peer_host, tls=False, certificate_principal=None))
            return
        try:
            secured = await tls_accept(connection, tls[0], 10)
        except TlsHandshakeFailed:
            return
        await _handle(ctx, metrics, secured, HttpPeer(peer_host, tls=True,
                                             certificate_principal=_certificate_principal(secured, tls[1])))

    await trio.serve_listeners(handler, listeners, task_status=task_status)
