"""Kafka's ACL model and the decision on one request, as Kafka's StandardAuthorizer makes it.

An ACL binds a resource pattern (type, name, LITERAL or PREFIXED; the literal name
``*`` matches every name) to an entry (principal, host, operation, ALLOW or DENY).
A request is allowed when the principal is a super user; else, when some ACL matches
the resource, when no matching DENY applies and a matching ALLOW does (READ, WRITE,
DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS); when no ACL
matches the resource at all, ``allow_everyone_if_no_acl_found`` decides.

Codes are Kafka's enums (AclOperation, ResourceType, PatternType, AclPermissionType).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafscale.protocol.acl_codes import Operation, PatternType, Permission, ResourceType

__all__ = ["ResourceType", "PatternType", "Operation", "Permission", "AclBinding", "AclFilter", "Authorizer",
           "InvalidAcl", "CLUSTER_NAME", "SUPPORTED_OPERATIONS", "parse_principal"]

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
_CACHE_LIMIT = 100_000


# An ALLOW of the key also allows these.
_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


# What Kafka reports in "authorized operations" per resource type (its AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
}


class InvalidAcl(ValueError):
    """An ACL that cannot be stored (Kafka answers INVALID_REQUEST); the text says why."""


def parse_principal(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise InvalidAcl(f"principal {text!r} is not of the form Type:name (User:alice)")
    return kind, name


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAcl("an ACL needs a resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl("an ACL's pattern type must be LITERAL or PREFIXED")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidAcl("an ACL needs an operation")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAcl("an ACL's permission must be ALLOW or DENY")
        if not self.resource_name:
            raise InvalidAcl("an ACL needs a resource name")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidAcl("a PREFIXED pattern cannot be '*' (use a LITERAL '*')")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
        if not self.host:
            raise InvalidAcl("an ACL needs a host ('*' for any)")
        parse_principal(self.principal)
        return self

    def to_json(self) -> list:
        return [self.resource_type.name, self.resource_name, self.pattern_type.name, self.principal, self.host,
                self.operation.name, self.permission.name]

    @classmethod
    def from_json(cls, data: list) -> AclBinding:
        rtype, name, pattern, principal, host, operation, permission = data
        return cls(ResourceType[rtype], name, PatternType[pattern], principal, host, Operation[operation],
                   Permission[permission])

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: None and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for value, unknown in ((self.resource_type, ResourceType.UNKNOWN), (self.pattern_type, PatternType.UNKNOWN),
                               (self.operation, Operation.UNKNOWN), (self.permission, Permission.UNKNOWN)):
            if value == unknown:
                raise InvalidAcl(f"the filter's {type(value).__name__} is UNKNOWN")
        return self

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not (
                    acl.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
                    and acl.matches_resource(acl.resource_type, self.resource_name)):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
                return False
            if self.resource_name is not None and self.resource_name != acl.resource_name:
                return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


class Authorizer:
    """Decisions over one set of ACLs (immutable: a change builds a new one)."""

    def __init__(self, acls: Iterable[AclBinding], super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.acls = tuple(acls)
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in self.acls:
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                self._literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
        self._cache: dict[tuple, bool] = {}

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [acl for acl in self._prefixed.get(resource_type, ()) if name.startswith(acl.resource_name)]
        return found

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        applying = [acl for acl in acls
                    if acl.principal in (principal, "User:*") and acl.host in (host, WILDCARD)]
        if any(acl.permission == Permission.DENY and acl.operation in (operation, Operation.ALL) for acl in applying):
            return False
        allowed_by = _IMPLIED.get(operation, frozenset({operation}))
        return any(acl.permission == Permission.ALLOW and (acl.operation == Operation.ALL or acl.operation in allowed_by)
                   for acl in applying)

    def allowed_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type may be used for ``operation`` (Kafka's
        authorizeByResourceType: an idempotent producer needs WRITE on some topic)."""
        if principal in self.super_users:
            return True
        if not any(acl.resource_type == resource_type for acl in self.acls):
            return self.allow_if_no_acl
        return any(acl.resource_type == resource_type and acl.permission == Permission.ALLOW
                   and acl.operation in (operation, Operation.ALL)
                   and acl.principal in (principal, "User:*") and acl.host in (host, WILDCARD)
                   for acl in self.acls)
