"""The gateway process: the Kafka and HTTP listeners around a gateway built by
:mod:`.wiring`, and a graceful shutdown that flushes and answers what was accepted."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, replace
from functools import partial

import trio
from prometheus_client import CollectorRegistry

from .budget import ByteBudget
from .clock import Clock
from .config import GatewayConfig, Listener
from .connection import RECEIVE_BUFFER_BYTES, Connection
from .context import GatewayContext
from .http import serve_http
from .log_limits import PerSourceLog
from .ownership import Endpoint
from .security.access import Access
from .security.session import ANONYMOUS, Session
from .security.tls import PrincipalMapper, TlsConfigError, TlsContext, TlsHandshakeFailed, tls_accept
from .security.tls_stream import TlsStream
from .wiring import Gateway, StartupError, assemble, open_storage
from .workers.metrics import MetricsPage, own_page, serve_own_page, workers_page

__all__ = ["serve", "Running", "StartupError"]

log = logging.getLogger("kafscale.server")


@dataclass
class Running:
    """What ``serve`` reports once it accepts connections."""

    port: int
    http_port: int | None
    context: GatewayContext
    budget: ByteBudget  # memory held for clients (tests check it returns to zero)
    unauthenticated: ByteBudget  # the part of it held by clients not yet authenticated


async def serve(config: GatewayConfig, shutdown: trio.Event, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    _, store = await open_storage(config)
    tls = _tls(config)
    # Listen first: the advertised ports must be known before joining a cluster.
    bound = await _listen(config)
    endpoints = _advertised(config, [spec for spec, _ in bound])
    _, first_host, first_port = endpoints[0]  # what config.network.advertised says from here on
    config = config.with_options(
        advertised_port=first_port,
        advertised_host=config.network.advertised_host if first_host == config.network.advertised[0] else first_host)
    async with assemble(config, store, endpoints, Clock()) as gateway:
        await gateway.start()
        await _serve_gateway(gateway, config, bound, endpoints, tls, shutdown, task_status)
    log.info("stopped")


async def _serve_gateway(gateway: Gateway, config: GatewayConfig, bound: list[tuple[Listener, list[trio.SocketListener]]],
                         endpoints: tuple[Endpoint, ...], tls: tuple[TlsContext, PrincipalMapper] | None,
                         shutdown: trio.Event, task_status) -> None:
    """Serve until ``shutdown``; then, in this order: not ready, hand partitions over (a
    cluster gateway), no new connections, flush what was accepted and answer it."""
    http_listeners = await _listen_http(config)
    http_port = http_listeners[0].socket.getsockname()[1] if http_listeners else None
    clients = Clients(gateway, config, tls)
    async with trio.open_nursery() as root:
        await root.start(gateway.run)
        if http_listeners:
            metrics = await _metrics_page(config, gateway.context.metrics.registry, root)
            root.start_soon(serve_http, gateway.context, http_listeners, metrics,
                            tls if tls and config.tls.http_ssl else None)
        async with trio.open_nursery() as client_nursery:
            accept_scope = trio.CancelScope()

            async def accept() -> None:
                with accept_scope:
                    async with trio.open_nursery() as acceptors:
                        for spec, sockets in bound:
                            acceptors.start_soon(partial(trio.serve_listeners, partial(clients.serve, spec=spec),
                                                         sockets, handler_nursery=client_nursery))

            client_nursery.start_soon(accept)
            gateway.context.ready = True
            log.info("serving Kafka on %s as node %d, storage %s, http %s, authorizer %s, %s mode",
                     ", ".join(f"{spec.name}://{spec.host}:{spec.port} (advertised {host}:{port})"
                               for (spec, _), (_, host, port) in zip(bound, endpoints, strict=True)),
                     gateway.node_id, gateway.store.describe(),
                     f"{config.network.http_host}:{http_port}" if http_port else "off", config.acl.authorizer,
                     gateway.mode.value)
            task_status.started(Running(bound[0][0].port, http_port, gateway.context, clients.budget,
                                        clients.unauthenticated))
            await shutdown.wait()

            log.info("shutting down: handing partitions over, then no new connections or requests; "
                     "flushing accepted data")
            gateway.context.ready = False
            await gateway.drain(config.cluster.drain_timeout_ms / 1000)
            accept_scope.cancel()
            for _, sockets in bound:
                for listener in sockets:
                    await listener.aclose()
            await clients.drain(gateway, config.limits.shutdown_timeout_ms / 1000)
            client_nursery.cancel_scope.cancel()
        root.cancel_scope.cancel()


class Clients:
    """The Kafka connections: each served in its own task, with the memory they may hold."""

    def __init__(self, gateway: Gateway, config: GatewayConfig, tls: tuple[TlsContext, PrincipalMapper] | None) -> None:
        self._context = gateway.context
        self._access = gateway.access
        self._tls = tls
        self._stall_ms = config.limits.connection_stall_ms
        self.budget = ByteBudget(config.limits.max_inflight_bytes)
        # A quarter of it is kept for frames of a real login (a few hundred bytes; 16 KiB at most).
        self.unauthenticated = ByteBudget(config.limits.unauthenticated_inflight_bytes, small_request=16 * 1024)
        gateway.metrics.inflight_bytes.set_function(lambda: self.budget.used)
        self.connections: set[Connection] = set()
        self._one_closed = trio.Event()  # set (and replaced) each time a connection ends
        self._receive_buffer = memoryview(bytearray(RECEIVE_BUFFER_BYTES))  # one for all: see Connection
        self._violations = PerSourceLog(logging.getLogger("kafscale.connection"))

    async def serve(self, stream: trio.SocketStream, spec: Listener) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            host, peer = "unknown", "unknown"
        client: trio.abc.Stream = stream
        principal = ANONYMOUS
        if spec.tls:
            assert self._tls is not None  # _tls() made it for every TLS listener
            secured = await _tls_handshake(stream, *self._tls, spec, host, self._access, self._stall_ms)
            if secured is None:
                return
            client, principal = secured
        session = Session.start(spec, host, principal)
        connection = Connection(self._context, client, self.budget, peer, session, unauthenticated=self.unauthenticated,
                                receive_buffer=self._receive_buffer, violations=self._violations)
        self.connections.add(connection)
        self._context.metrics.connections.inc()
        try:
            await connection.serve()
        except Exception:  # one connection's failure must never take the gateway down
            log.exception("connection from %s failed", peer)
        finally:
            self.connections.discard(connection)
            self._context.metrics.connections.dec()
            self._one_closed.set()
            self._one_closed = trio.Event()

    async def drain(self, gateway: Gateway, grace_s: float) -> None:
        """Stop reading requests, flush what was accepted, and let the connections send their
        answers, for at most ``grace_s``."""
        for connection in list(self.connections):
            connection.stop_reading()
        with trio.move_on_after(grace_s) as grace:
            await gateway.flush()  # produce handlers waiting on it get answered
            while self.connections:  # connections drain their in-flight answers
                await self._one_closed.wait()
        if grace.cancelled_caught:
            log.warning("shutdown grace period over; closing %d connection(s)", len(self.connections))


def _tls(config: GatewayConfig) -> tuple[TlsContext, PrincipalMapper] | None:
    """The TLS context and principal mapping, when a listener or the HTTP endpoint uses TLS."""
    if not (any(spec.tls for spec in config.network.kafka_listeners) or config.tls.http_ssl):
        return None
    try:
        return (TlsContext(config.tls.ssl_certfile, config.tls.ssl_keyfile, config.tls.ssl_key_password, config.tls.ssl_cafile,
                           config.tls.ssl_client_auth), PrincipalMapper(config.tls.ssl_principal_mapping_rules))
    except TlsConfigError as exc:
        raise StartupError(str(exc)) from exc


async def _listen(config: GatewayConfig) -> list[tuple[Listener, list[trio.SocketListener]]]:
    """Every Kafka listener bound, each with the port it got (0 asks for a free one). A
    worker binds each listener's port shared with its siblings (SO_REUSEPORT: the kernel
    spreads new connections) and a port of its own, which it advertises: clients bootstrap
    anywhere and reach each partition's leader directly."""
    bound: list[tuple[Listener, list[trio.SocketListener]]] = []
    network = config.network
    for index, spec in enumerate(network.kafka_listeners):
        try:
            if network.is_worker:
                own_port = network.worker_ports + network.worker_slot * len(network.kafka_listeners) + index \
                    if network.worker_ports else 0
                own = await _reuseport_listener(spec.host, own_port, shared=False)
                sockets = [own, await _reuseport_listener(spec.host, spec.port, shared=True)]
            else:
                sockets = await trio.open_tcp_listeners(spec.port, host=spec.host or None)
        except OSError as exc:
            raise StartupError(f"cannot listen on {spec.host}:{spec.port} ({spec.name}): {exc}") from exc
        bound.append((replace(spec, port=sockets[0].socket.getsockname()[1]), sockets))
    return bound


async def _reuseport_listener(host: str, port: int, *, shared: bool) -> trio.SocketListener:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        await sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return trio.SocketListener(sock)


async def _metrics_page(config: GatewayConfig, registry: CollectorRegistry, nursery: trio.Nursery) -> MetricsPage:
    """What /metrics answers: this gateway's series; a worker's siblings' too, each labelled
    with its worker (they share the HTTP port, and a scrape reaches any one of them)."""
    network = config.network
    if not network.is_worker:
        return own_page(registry)
    await nursery.start(serve_own_page, registry, network.worker_sockets, network.worker_slot)
    return workers_page(registry, network.worker_sockets, network.worker_slot, network.worker_count)


async def _listen_http(config: GatewayConfig) -> list[trio.SocketListener]:
    network = config.network
    if network.http_port < 0:
        return []
    try:
        if network.is_worker:  # the workers share one HTTP port too
            return [await _reuseport_listener(network.http_host, network.http_port, shared=network.http_port > 0)]
        return await trio.open_tcp_listeners(network.http_port, host=network.http_host)
    except OSError as exc:
        raise StartupError(f"cannot listen on {network.http_host}:{network.http_port}: {exc}") from exc


async def _tls_handshake(stream: trio.SocketStream, tls: TlsContext, mapper: PrincipalMapper, listener: Listener,
                         host: str, access: Access, stall_ms: int) -> tuple[TlsStream, str] | None:
    """The TLS stream of a new connection and its principal, taken from the client certificate
    (ANONYMOUS when none was sent); None, the connection closed, when the handshake fails."""
    try:
        secured = await tls_accept(stream, tls, stall_ms / 1000)
    except TlsHandshakeFailed as exc:
        access.tls_failed(listener, host, str(exc))
        return None
    certificate = secured.getpeercert(binary_form=True)
    if certificate:
        try:
            principal = mapper.principal(certificate)
        except ValueError as exc:  # a certificate cryptography cannot read
            principal, reason = None, f"unreadable client certificate: {exc}"
        else:
            reason = "no ssl_principal_mapping_rules rule matches the client certificate"
        if principal is None:
            access.tls_failed(listener, host, reason)
            await trio.aclose_forcefully(secured)
            return None
        return secured, principal
    return secured, ANONYMOUS


def _advertised(config: GatewayConfig, listeners: list[Listener]) -> tuple[Endpoint, ...]:
    """Each bound listener's advertised address: its advertised_listeners entry, else
    advertised_host (or its own host) and its port; advertised_port, when set, is the first's."""
    named = config.network.advertised_endpoints
    endpoints = []
    for index, spec in enumerate(listeners):
        port = config.network.advertised_port if index == 0 and config.network.advertised_port else spec.port
        host = config.network.advertised_host or _reachable(spec.host)
        endpoints.append((spec.name, *named.get(spec.name, (host, port))))
    return tuple(endpoints)


def _reachable(host: str) -> str:
    """A listener bound to every address is advertised at the address the machine's own
    name resolves to (a pod's IP), since no client can connect to 0.0.0.0."""
    if host not in ("", "0.0.0.0", "::"):
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
