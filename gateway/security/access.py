"""Who a connection is and what it may do: the gateway's authenticator and authorizer.

:class:`~.session.Session` is one connection's state (listener, principal, SASL progress),
changed here by the login's events. :class:`Access` is the gateway's: the credential and
ACL store, the SASL mechanisms, the ACL decisions, each for the session it is given. Handlers get a
:class:`ClientAccess`, bound to their request's session (``RequestContext.access``):
there is no ambient session to fall back on, and a decision asked without one refuses.
"""

from __future__ import annotations

import hmac
import logging
import secrets

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError

from ..config import GatewayConfig, Listener
from ..log_limits import PerSourceLog
from ..metrics import Metrics
from .acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, Authorizer, Operation, ResourceType
from .plain import parse_plain
from .scram import MECHANISMS, AuthenticationFailed, ScramExchange, make_credential
from .session import Session, SessionEvent, SessionState
from .store import SecurityStore

__all__ = ["Access", "ClientAccess", "load_plain_users"]

log = logging.getLogger("kafscale.security")

# Metric labels are ours to choose, never the client's: any other mechanism name is "unknown".
_KNOWN_MECHANISMS = frozenset({"PLAIN", *MECHANISMS})


def mechanism_label(mechanism: str | None) -> str:
    return mechanism if mechanism in _KNOWN_MECHANISMS else "unknown"


def load_plain_users(path: str) -> dict[str, str]:
    """``user=password`` lines ('#' comments, blank lines ignored)."""
    users = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, password = line.partition("=")
            if not sep or not user.strip() or not password:
                raise ValueError(f"{path}:{number}: expected user=password")
            users[user.strip()] = password
    return users


class Access:
    def __init__(self, config: GatewayConfig, store: SecurityStore, metrics: Metrics) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics
        self.mechanisms = config.sasl.mechanisms
        self.plain_users = load_plain_users(config.sasl.sasl_plain_users_file) if config.sasl.sasl_plain_users_file else {}
        self._decoy_key = secrets.token_bytes(32)
        # HTTP Basic failures, one at a time per (user, source): the Kafka listener closes the
        # connection after a failed login, so each guess costs a connection and the delay;
        # HTTP keeps its connections, so without this 200 clients guessed ~1,300 times a second.
        self._failing: dict[tuple[str, str], trio.Lock] = {}
        self._failure_log = PerSourceLog(log)
        self.enforcing = config.acl.authorizer == "acl"
        self.authorizer = Authorizer((), config.acl.super_user_set, config.acl.allow_everyone_if_no_acl_found)
        store.on_change = self._acls_changed

    def _acls_changed(self) -> None:
        if tuple(self.store.acls.values()) != self.authorizer.acls:
            self.authorizer = Authorizer(self.store.acls.values(), self.config.acl.super_user_set,
                                         self.config.acl.allow_everyone_if_no_acl_found)

    async def bootstrap(self) -> None:
        """Give the configured first user SCRAM credentials, unless it has some already."""
        user, password = self.config.sasl.sasl_bootstrap_user, self.config.sasl.sasl_bootstrap_password
        if not user or self.store.users.get(user):
            return
        await self.store.alter_user(user, [make_credential(mechanism, password) for mechanism in MECHANISMS])
        log.info("created SCRAM credentials for bootstrap user %s", user)

    # -- authentication --------------------------------------------------------------------

    def handshake(self, session: Session, mechanism: str, *, raw_tokens: bool) -> ErrorCode:
        """SaslHandshake: ``mechanism`` for the exchange that follows (its tokens bare frames
        when ``raw_tokens``, after v0). Anything but an answer of none fails the session."""
        if not session.listener.sasl or not session.allows(SessionEvent.HANDSHAKE):
            session.fail()  # one handshake per exchange, on SASL listeners only, as Kafka
            return ErrorCode.illegal_sasl_state
        if session.authenticated and mechanism != session.mechanism:
            session.fail()  # KIP-368: re-authenticate with the same mechanism
            return ErrorCode.unsupported_sasl_mechanism
        if mechanism not in self.mechanisms:
            self._failed(session, mechanism, "unsupported mechanism")
            return ErrorCode.unsupported_sasl_mechanism
        session.handshake(mechanism, raw_tokens=raw_tokens)
        return ErrorCode.none

    async def authenticate(self, session: Session, token: bytes) -> tuple[bytes, int]:
        """One SaslAuthenticate step: the server's token and, once done, the session lifetime
        in ms (0: unlimited). Raises KafkaError(SASL_AUTHENTICATION_FAILED) after the delay."""
        mechanism = session.mechanism
        if not session.exchanging or mechanism is None:
            session.fail()
            raise KafkaError(ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake")
        try:
            if mechanism == "PLAIN":
                user, password = parse_plain(token)
                if not await self._plain_matches(user, password):
                    raise AuthenticationFailed("authentication failed: invalid user name or password")
                return b"", self._authenticated(session, user)
            if session.exchange is None:
                exchange = ScramExchange(mechanism, lambda name: self.store.credential(name, mechanism),
                                         self._decoy_key)
                session.exchange_started(exchange)
                return exchange.first(token), 0
            server_final = session.exchange.final(token)
            return server_final, self._authenticated(session, session.exchange.username or "")
        except AuthenticationFailed as exc:
            self._failed(session, mechanism, str(exc))
            await trio.sleep(self.config.sasl.auth_failure_delay_ms / 1000)
            raise KafkaError(ErrorCode.sasl_authentication_failed, str(exc)) from None

    async def verify_password(self, user: str, password: str, source: str) -> bool:
        """Whether ``password`` is ``user``'s (a PLAIN user's, or one of its SCRAM credentials'):
        the HTTP endpoint's Basic authentication from ``source`` (the client's address). A
        failure waits as a SASL failure does, and failures of one user from one source wait
        in turn, so guesses cannot be multiplied by sending many at once."""
        key = (user[:256], source)
        lock = self._failing.get(key)
        if lock is not None:  # guesses of this user from here are failing: one at a time
            async with lock:
                pass
        if await self._plain_matches(user, password):
            self.metrics.authentications.labels("HTTP", "success").inc()
            return True
        self.metrics.authentications.labels("HTTP", "failure").inc()
        self._failure_log.log(source, "HTTP authentication failed from %s for user %r", source, user[:64])
        lock = self._failing.setdefault(key, trio.Lock())
        try:
            async with lock:
                await trio.sleep(self.config.sasl.auth_failure_delay_ms / 1000)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._failing.pop(key, None)  # nothing waits: the map holds only what is failing now
        return False

    async def _plain_matches(self, user: str, password: str) -> bool:
        expected = self.plain_users.get(user)
        if expected is not None:
            return hmac.compare_digest(expected.encode(), password.encode())
        credentials = list(self.store.users.get(user, {}).values())
        # PBKDF2 takes milliseconds of CPU per guess: never on the event loop.
        return await trio.to_thread.run_sync(lambda: any(c.matches(password) for c in credentials))

    def _authenticated(self, session: Session, user: str) -> int:
        principal = f"User:{user}"
        if session.state is SessionState.REAUTHENTICATING and principal != session.principal:
            raise AuthenticationFailed("re-authentication must keep the same user")
        lifetime = self.config.sasl.connections_max_reauth_ms
        session.authenticated_as(principal, trio.current_time() + lifetime / 1000 if lifetime else None)
        self.metrics.authentications.labels(mechanism_label(session.mechanism), "success").inc()
        return lifetime

    def _failed(self, session: Session, mechanism: str, reason: str) -> None:
        session.fail()
        self.metrics.authentications.labels(mechanism_label(mechanism), "failure").inc()
        log.warning("authentication failed from %s on %s with %r: %s", session.host, session.listener.name,
                    mechanism[:32], reason)

    def tls_failed(self, listener: Listener, host: str, reason: str) -> None:
        self.metrics.authentications.labels("TLS", "failure").inc()
        log.warning("TLS handshake failed from %s on %s: %s", host, listener.name, reason)

    # -- authorization ---------------------------------------------------------------------

    def allowed(self, session: Session | None, operation: Operation, resource_type: ResourceType, name: str,
                quiet: bool = False) -> bool:
        """Whether the client of ``session`` may; a refusal is counted and logged unless
        ``quiet`` (a listing that leaves out what the client may not see is not a refusal).
        Without a session there is no client to decide for: refused (a defect of the caller)."""
        if not self.enforcing:
            return True
        if session is None:
            log.error("authorization of %s %s %s asked without a client session: refused",
                      operation.name, resource_type.name, name)
            return False
        if self.authorizer.authorize(session.principal, session.host, operation, resource_type, name):
            return True
        if quiet:
            return False
        self.metrics.authorization_denials.labels(operation.name, resource_type.name).inc()
        log.info("denied %s %s on %s %s from %s", session.principal, operation.name, resource_type.name, name,
                 session.host)
        return False

    def allowed_any(self, session: Session | None, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the client may do ``operation`` on some resource of the type (ACL filters)."""
        if not self.enforcing:
            return True
        return session is not None and self.authorizer.allowed_any(session.principal, session.host, operation,
                                                                   resource_type)


class ClientAccess:
    """Authentication and authorization for one connection's client: every check decides
    for the session it was made with."""

    def __init__(self, access: Access, session: Session) -> None:
        self._access = access
        self.session = session

    @property
    def store(self) -> SecurityStore:
        return self._access.store

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return tuple(self._access.mechanisms)

    def handshake(self, mechanism: str, *, raw_tokens: bool) -> ErrorCode:
        return self._access.handshake(self.session, mechanism, raw_tokens=raw_tokens)

    async def authenticate(self, token: bytes) -> tuple[bytes, int]:
        return await self._access.authenticate(self.session, token)

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str, quiet: bool = False) -> bool:
        return self._access.allowed(self.session, operation, resource_type, name, quiet)

    def allowed_topic(self, operation: Operation, topic: str, quiet: bool = False) -> bool:
        return self.allowed(operation, ResourceType.TOPIC, topic, quiet)

    @property
    def sees_every_topic(self) -> bool:
        """Whether no authorizer filters what this client sees (so a listing need not ask per topic)."""
        return not self._access.enforcing

    def allowed_group(self, operation: Operation, group: str, quiet: bool = False) -> bool:
        return self.allowed(operation, ResourceType.GROUP, group, quiet)

    def may_create_topic(self, topic: str) -> bool:
        """Kafka's rule: CREATE on the cluster, or on the topic."""
        return self.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True) or \
            self.allowed(Operation.CREATE, ResourceType.TOPIC, topic)

    def require_topic(self, operation: Operation, topic: str) -> None:
        if not self.allowed_topic(operation, topic):
            raise KafkaError(ErrorCode.topic_authorization_failed, f"{operation.name} on topic {topic!r} is not allowed")

    def require_group(self, operation: Operation, group: str) -> None:
        if not self.allowed_group(operation, group):
            raise KafkaError(ErrorCode.group_authorization_failed, f"{operation.name} on group {group!r} is not allowed")

    def require_transactional_id(self, operation: Operation, transactional_id: str) -> None:
        if not self.allowed(operation, ResourceType.TRANSACTIONAL_ID, transactional_id):
            raise KafkaError(ErrorCode.transactional_id_authorization_failed,
                             f"{operation.name} on transactional id {transactional_id!r} is not allowed")

    def allowed_cluster(self, operation: Operation, quiet: bool = False) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME, quiet)

    def require_cluster(self, operation: Operation) -> None:
        if not self.allowed_cluster(operation):
            raise KafkaError(ErrorCode.cluster_authorization_failed, f"{operation.name} on the cluster is not allowed")

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The operations the client may do on a resource, as the bit field Metadata,
        DescribeCluster and DescribeGroups report (bit n: Operation n; Kafka's supported set)."""
        return sum(1 << operation for operation in SUPPORTED_OPERATIONS[resource_type]
                   if self.allowed(operation, resource_type, name, quiet=True))

    def cluster_authorized_operations(self) -> int:
        """Kafka's rule: the cluster's operations are told only to a client that may describe it."""
        if not self.allowed_cluster(Operation.DESCRIBE, quiet=True):
            return 0
        return self.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)

    def allowed_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        return self._access.allowed_any(self.session, operation, resource_type)
