"""The gateway process: storage, metadata, partition logs, the Kafka and HTTP listeners,
and a graceful shutdown that flushes and answers what was accepted."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial

import trio

from kafscale.storage_backends import S3Options, StorageError, open_store

from .budget import ByteBudget
from .cluster.catalog_mirror import mirror_catalog
from .cluster.etcd import EtcdClient, EtcdError, tls_context
from .cluster.etcd_metadata import EtcdGroupStore, EtcdMetadata, cluster_root
from .cluster.membership import ClusterMember, ClusterStartError
from .cluster.ownership import Endpoint, SoleGateway
from .config import GatewayConfig, Listener
from .connection import Connection
from .context import GatewayContext
from .groups import GroupCoordinator, GroupStore
from .groups.coordinator import GroupSettings
from .http import serve_http
from .logs import LogManager
from .metadata import EmbeddedMetadata, MetadataUnreadable
from .metrics import Metrics
from .security.access import Access, Session
from .security.store import EmbeddedSecurity, EtcdSecurity
from .security.tls import PrincipalMapper, TlsConfigError, TlsContext, TlsHandshakeFailed, tls_accept
from .security.tls_stream import TlsStream
from .storage import AsyncStore

__all__ = ["serve", "Running", "StartupError"]

log = logging.getLogger("kafscale.server")


class StartupError(RuntimeError):
    """The gateway cannot start (bad storage, port in use...); the message says why."""


@dataclass
class Running:
    """What ``serve`` reports once it accepts connections."""

    port: int
    http_port: int | None
    context: GatewayContext
    budget: ByteBudget  # memory held for clients (tests check it returns to zero)
    unauthenticated: ByteBudget  # the part of it held by clients not yet authenticated


async def serve(config: GatewayConfig, shutdown: trio.Event, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    try:
        backend = open_store(config.storage, fsync=config.fsync, s3=S3Options(
            endpoint=config.s3_endpoint or None, region=config.s3_region or None,
            access_key_id=config.s3_access_key_id or None,
            secret_access_key=config.s3_secret_access_key or None, path_style=config.s3_path_style,
            allow_http=config.s3_allow_http, timeout_ms=config.s3_timeout_ms, retries=config.s3_retries,
        ))
        await trio.to_thread.run_sync(backend.check)
    except (ValueError, OSError, StorageError) as exc:
        raise StartupError(f"cannot use storage {config.storage!r}: {exc}") from exc
    store = AsyncStore(backend, config.storage_threads)

    tls, mapper = None, None
    if any(spec.tls for spec in config.kafka_listeners) or config.http_ssl:
        try:
            tls = TlsContext(config.ssl_certfile, config.ssl_keyfile, config.ssl_key_password, config.ssl_cafile,
                             config.ssl_client_auth)
            mapper = PrincipalMapper(config.ssl_principal_mapping_rules)
        except TlsConfigError as exc:
            raise StartupError(str(exc)) from exc

    # Listen first: the advertised ports must be known before joining a cluster.
    bound: list[tuple[Listener, list[trio.SocketListener]]] = []
    for spec in config.kafka_listeners:
        try:
            sockets = await trio.open_tcp_listeners(spec.port, host=spec.host or None)
        except OSError as exc:
            raise StartupError(f"cannot listen on {spec.host}:{spec.port} ({spec.name}): {exc}") from exc
        bound.append((replace(spec, port=sockets[0].socket.getsockname()[1]), sockets))
    listeners = [socket for _, sockets in bound for socket in sockets]
    port = bound[0][0].port
    endpoints = _advertised(config, [spec for spec, _ in bound])
    _, first_host, first_port = endpoints[0]  # what config.advertised says from here on
    config = replace(config, advertised_port=first_port,
                     advertised_host=config.advertised_host if first_host == config.advertised[0] else first_host)

    metrics = Metrics()
    settings = GroupSettings(config.group_min_session_timeout_ms, config.group_max_session_timeout_ms,
                             config.group_initial_rebalance_delay_ms)
    member: ClusterMember | None = None
    etcd: EtcdClient | None = None
    if config.etcd_endpoints:
        try:
            etcd_tls = tls_context(config.etcd_cafile, config.etcd_certfile, config.etcd_keyfile)
            etcd = EtcdClient([e.strip() for e in config.etcd_endpoints.split(",") if e.strip()],
                              config.etcd_timeout_ms, tls=etcd_tls, username=config.etcd_username,
                              password=config.etcd_password)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise StartupError(f"cannot set up the etcd client: {exc}") from exc
        root = cluster_root(config.etcd_prefix, config.cluster_id)
        metadata = EtcdMetadata(etcd, root)
        security: EmbeddedSecurity | EtcdSecurity = EtcdSecurity(etcd, root)
        member = ClusterMember(config, etcd, metadata, root, endpoints)
        member.view.security = security
        groups = GroupCoordinator(EtcdGroupStore(etcd, root, config.coordinator_slots), settings,
                                  on_rebalance=lambda group_id: metrics.rebalances.inc())
        groups.use_slots(config.coordinator_slots)
        logs = LogManager(config, store, metadata, member)
    else:
        metadata = EmbeddedMetadata(store, config.namespace)
        security = EmbeddedSecurity(store, config.namespace)
        groups = GroupCoordinator(GroupStore(store, config.namespace), settings,
                                  on_rebalance=lambda group_id: metrics.rebalances.inc())
        logs = LogManager(config, store, metadata, SoleGateway(config.node_id, *config.advertised, endpoints))
    try:
        access = Access(config, security, metrics)
    except (OSError, ValueError) as exc:
        raise StartupError(f"cannot read sasl_plain_users_file: {exc}") from exc
    try:
        await metadata.load()
        await security.load()
        await access.bootstrap()
        if member is None:
            await groups.load()
        await logs.start()
    except StorageError as exc:
        raise StartupError(f"storage {backend.describe()} is unavailable: {exc}") from exc
    except MetadataUnreadable as exc:
        raise StartupError(f"{exc} (restore it from a backup, or move it aside to start empty)") from exc
    except EtcdError as exc:
        raise StartupError(f"etcd at {config.etcd_endpoints}: {exc}") from exc
    metrics.watch_log(logs)
    metrics.watch_groups(groups)
    if member is not None:
        member.logs, member.groups = logs, groups
        metrics.watch_cluster(member, etcd)
        try:
            await member.join()
        except ClusterStartError as exc:
            raise StartupError(str(exc)) from exc
    ctx = GatewayContext(config, logs, metrics, groups, access)
    budget = ByteBudget(config.max_inflight_bytes)
    # A quarter of it is kept for frames of a real login (a few hundred bytes; 16 KiB at most).
    unauthenticated = ByteBudget(config.unauthenticated_inflight_bytes, small_request=16 * 1024)
    metrics.inflight_bytes.set_function(lambda: budget.used)
    connections: set[Connection] = set()

    http_listeners = []
    if config.http_port >= 0:
        try:
            http_listeners = await trio.open_tcp_listeners(config.http_port, host=config.http_host)
        except OSError as exc:
            raise StartupError(f"cannot listen on {config.http_host}:{config.http_port}: {exc}") from exc
    http_port = http_listeners[0].socket.getsockname()[1] if http_listeners else None

    async def on_connection(stream: trio.SocketStream, spec: Listener) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            host, peer = "unknown", "unknown"
        session = Session.start(spec, host)
        if spec.tls:
            assert tls is not None and mapper is not None
            secured = await _tls_handshake(stream, tls, mapper, session, access, config.connection_stall_ms)
            if secured is None:
                return
            stream = secured
        connection = Connection(ctx, stream, budget, peer, session, unauthenticated=unauthenticated)
        connections.add(connection)
        ctx.metrics.connections.inc()
        try:
            await connection.serve()
        except Exception:  # one connection's failure must never take the gateway down
            log.exception("connection from %s failed", peer)
        finally:
            connections.discard(connection)
            ctx.metrics.connections.dec()

    async with trio.open_nursery() as root:
        await root.start(logs.run)
        await root.start(groups.run)
        if member is not None:
            await root.start(member.run)
            root.start_soon(mirror_catalog, metadata, store, config.namespace)
        if http_listeners:
            root.start_soon(serve_http, ctx, http_listeners, tls if config.http_ssl else None)
        async with trio.open_nursery() as clients:
            accept_scope = trio.CancelScope()

            async def accept() -> None:
                with accept_scope:
                    async with trio.open_nursery() as acceptors:
                        for spec, sockets in bound:
                            acceptors.start_soon(partial(trio.serve_listeners, partial(on_connection, spec=spec),
                                                         sockets, handler_nursery=clients))

            clients.start_soon(accept)
            ctx.ready = True
            log.info("serving Kafka on %s, storage %s, http %s, authorizer %s",
                     ", ".join(f"{spec.name}://{spec.host}:{spec.port} (advertised {host}:{port})"
                               for (spec, _), (_, host, port) in zip(bound, endpoints, strict=True)),
                     backend.describe(), f"{config.http_host}:{http_port}" if http_port else "off", config.authorizer)
            task_status.started(Running(port, http_port, ctx, budget, unauthenticated))
            await shutdown.wait()

            log.info("shutting down: no new connections or requests; flushing accepted data")
            ctx.ready = False
            accept_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            for connection in list(connections):
                connection.stop_reading()
            with trio.move_on_after(config.shutdown_timeout_ms / 1000) as grace:
                await logs.close()  # flush now: produce handlers waiting on it get answered
                while connections:  # connections drain their in-flight answers
                    await trio.sleep(0.01)
            if grace.cancelled_caught:
                log.warning("shutdown grace period over; closing %d connection(s)", len(connections))
            clients.cancel_scope.cancel()
        if member is not None:
            await member.leave()  # hands every partition over at once instead of after the lease
        root.cancel_scope.cancel()
    if etcd is not None:
        await etcd.aclose()
    log.info("stopped")


async def _tls_handshake(stream: trio.SocketStream, tls: TlsContext, mapper: PrincipalMapper, session: Session,
                         access: Access, stall_ms: int) -> TlsStream | None:
    """The TLS stream of a new connection, its principal taken from the client certificate
    (when one was sent); None, the connection closed, when the handshake fails."""
    try:
        secured = await tls_accept(stream, tls, stall_ms / 1000)
    except TlsHandshakeFailed as exc:
        access.tls_failed(session.listener, session.host, str(exc))
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
            access.tls_failed(session.listener, session.host, reason)
            await trio.aclose_forcefully(secured)
            return None
        session.principal = principal
    return secured


def _advertised(config: GatewayConfig, listeners: list[Listener]) -> tuple[Endpoint, ...]:
    """Each bound listener's advertised address: its advertised_listeners entry, else
    advertised_host (or its own host) and its port; advertised_port, when set, is the first's."""
    named = config.advertised_endpoints
    endpoints = []
    for index, spec in enumerate(listeners):
        port = config.advertised_port if index == 0 and config.advertised_port else spec.port
        endpoints.append((spec.name, *named.get(spec.name, (config.advertised_host or spec.host, port))))
    return tuple(endpoints)
