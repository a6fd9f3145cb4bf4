"""Group configs (KIP-848's dynamic group configs): what IncrementalAlterConfigs sets on a
GROUP resource and DescribeConfigs tells, cluster-wide. A config set for a group overrides
the gateway's default (its ``group_consumer_*`` option) for that group alone; configs may
be set before the group exists, and stay when it is deleted, as in Kafka.

:class:`EmbeddedGroupConfigs` keeps them as one document in the store (a lone gateway);
:class:`EtcdGroupConfigs` as one etcd key per group, followed by every gateway's cluster
view, so whichever gateway an admin asks, the group's coordinator sees the change.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

import trio

from kafscale.protocol.errors import ErrorCode, KafkaError
from kafscale.protocol.layout import meta_prefix
from kafscale.storage_backends import ObjectNotFound

from ..etcd import EtcdClient, KeyValue
from ..metadata import MetadataUnreadable
from ..storage import AsyncStore
from .settings import GroupSettings

__all__ = ["GroupConfigs", "GroupConfigSpec", "GROUP_CONFIGS", "EmbeddedGroupConfigs", "EtcdGroupConfigs",
           "GROUP_CONFIGS_PART", "settings_with", "validate_group_configs"]

log = logging.getLogger("kafscale.groups")

GROUP_CONFIGS_PART = "group-configs/"  # the etcd prefix under the cluster's root


@dataclass(frozen=True, slots=True)
class GroupConfigSpec:
    setting: str  # the GroupSettings field it overrides
    documentation: str
    minimum: int = 1  # a number's bounds (Kafka's)
    maximum: int = 2**31 - 1
    choices: tuple[str, ...] = ()  # a word's values (a number when empty)


GROUP_CONFIGS: dict[str, GroupConfigSpec] = {
    "consumer.session.timeout.ms": GroupConfigSpec(
        "consumer_session_timeout_ms", "A consumer-protocol member that does not heartbeat for this long is "
        "removed from the group"),
    "consumer.heartbeat.interval.ms": GroupConfigSpec(
        "consumer_heartbeat_interval_ms", "How often consumer-protocol members heartbeat (and so how soon they "
        "learn of a new assignment)"),
    "share.session.timeout.ms": GroupConfigSpec(
        "share_session_timeout_ms", "A share-group member that does not heartbeat for this long is removed from "
        "the group, and the records it holds are given back"),
    "share.heartbeat.interval.ms": GroupConfigSpec(
        "share_heartbeat_interval_ms", "How often share-group members heartbeat"),
    "share.record.lock.duration.ms": GroupConfigSpec(
        "share_record_lock_duration_ms", "How long a share-group member holds a record it fetched before it is "
        "given back", minimum=1000, maximum=3_600_000),
    "share.delivery.count.limit": GroupConfigSpec(
        "share_delivery_count_limit", "Deliveries of one record to the share group before it is archived",
        minimum=2, maximum=10),
    "share.auto.offset.reset": GroupConfigSpec(
        "share_auto_offset_reset", "Where the share group starts reading a partition it has no state for",
        choices=("latest", "earliest")),
    "share.isolation.level": GroupConfigSpec(
        "share_isolation_level", "Whether the share group is given records of open and aborted transactions",
        choices=("read_uncommitted", "read_committed")),
}


def _value(spec: GroupConfigSpec, value: str) -> int | str:
    return value if spec.choices else int(value)


def settings_with(settings: GroupSettings, configs: dict[str, str]) -> GroupSettings:
    """The gateway's settings with one group's configs over them."""
    if not configs:
        return settings
    overrides: dict[str, Any] = {GROUP_CONFIGS[name].setting: _value(GROUP_CONFIGS[name], value)
                                 for name, value in configs.items()}
    return replace(settings, **overrides)


def check_values(configs: dict[str, str]) -> None:
    """INVALID_CONFIG for a name Kafka's group configs do not have here, or a value out of
    its range or choices."""
    for name, value in configs.items():
        spec = GROUP_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.invalid_config, f"unknown group config {name!r} (served: "
                             f"{', '.join(sorted(GROUP_CONFIGS))})")
        if spec.choices:
            if value not in spec.choices:
                raise KafkaError(ErrorCode.invalid_config, f"{name} must be one of {', '.join(spec.choices)}, "
                                                           f"not {value!r}")
        elif not value.isdecimal() or not spec.minimum <= int(value) <= spec.maximum:
            raise KafkaError(ErrorCode.invalid_config, f"{name} must be an int from {spec.minimum} to "
                                                       f"{spec.maximum}, not {value!r}")


def validate_group_configs(configs: dict[str, str], settings: GroupSettings) -> None:
    """What :func:`check_values` refuses, and a heartbeat interval not below the session
    timeout (what Kafka checks of them when they are set)."""
    check_values(configs)
    effective = settings_with(settings, configs)
    for kind in ("consumer", "share"):
        interval = getattr(effective, f"{kind}_heartbeat_interval_ms")
        timeout = getattr(effective, f"{kind}_session_timeout_ms")
        if interval >= timeout:
            raise KafkaError(ErrorCode.invalid_config, f"{kind}.heartbeat.interval.ms ({interval}) must be below "
                                                       f"{kind}.session.timeout.ms ({timeout})")


class GroupConfigs(Protocol):
    async def load(self) -> None: ...
    def of(self, group_id: str) -> dict[str, str]:
        """The configs set for ``group_id`` (empty: the gateway's defaults)."""
        ...
    async def set(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace the configs of ``group_id`` (empty: back to the defaults)."""
        ...


class EmbeddedGroupConfigs:
    """Every group's configs in one JSON document (they change rarely)."""

    def __init__(self, store: AsyncStore, namespace: str) -> None:
        self._store = store
        self._key = meta_prefix(namespace) + "group-configs.json"
        self._configs: dict[str, dict[str, str]] = {}
        self._lock = trio.Lock()

    async def load(self) -> None:
        try:
            raw = await self._store.get(self._key)
        except ObjectNotFound:
            return
        try:
            self._configs = _decoded(raw)
        except ValueError as exc:
            raise MetadataUnreadable(f"group configs object {self._key} is unreadable: {exc}") from exc

    def of(self, group_id: str) -> dict[str, str]:
        return self._configs.get(group_id, {})

    def every(self) -> dict[str, dict[str, str]]:
        """Every group with configs of its own: its configs."""
        return dict(self._configs)

    async def set(self, group_id: str, configs: dict[str, str]) -> None:
        async with self._lock:
            changed = {g: c for g, c in self._configs.items() if g != group_id}
            if configs:
                changed[group_id] = dict(configs)
            await self._store.put(self._key, json.dumps(changed, sort_keys=True).encode())
            self._configs = changed


class EtcdGroupConfigs:
    """One etcd key per group with configs (``group-configs/{hex id}``), followed by the
    cluster view (:class:`~kafscale.gateway.cluster.view.FollowedPart`)."""

    def __init__(self, etcd: EtcdClient, root: str) -> None:
        self._etcd = etcd
        self.prefix = root + GROUP_CONFIGS_PART
        self._configs: dict[str, dict[str, str]] = {}

    async def load(self) -> None:
        self.replace(await self._etcd.get_prefix(self.prefix))

    def replace(self, kvs: list[KeyValue]) -> None:
        configs: dict[str, dict[str, str]] = {}
        for kv in kvs:
            try:
                configs[self._group_of(kv)] = _configs_of(json.loads(kv.value))
            except ValueError as exc:  # written by hand, damaged: that group keeps the defaults
                log.error("etcd key %s is unreadable (skipped): %r", kv.key, exc)
        self._configs = configs

    def apply(self, kv: KeyValue, deleted: bool) -> None:
        """One change seen on the watch (an unreadable one raises ``ValueError``: the view
        logs and skips it)."""
        configs = {g: c for g, c in self._configs.items() if g != self._group_of(kv)}
        if not deleted:
            configs[self._group_of(kv)] = _configs_of(json.loads(kv.value))
        self._configs = configs

    def _group_of(self, kv: KeyValue) -> str:
        return bytes.fromhex(kv.key[len(self.prefix):]).decode()

    def of(self, group_id: str) -> dict[str, str]:
        return self._configs.get(group_id, {})

    async def set(self, group_id: str, configs: dict[str, str]) -> None:
        key = self.prefix + group_id.encode().hex()
        # A plain write: of two admins altering one group at once the last wins, as through
        # Kafka's controller.
        if configs:
            await self._etcd.put(key, json.dumps(configs, sort_keys=True).encode())
        else:
            await self._etcd.delete(key)
        self._configs = {**{g: c for g, c in self._configs.items() if g != group_id},
                         **({group_id: dict(configs)} if configs else {})}


def _configs_of(data) -> dict[str, str]:
    """A stored group's configs; ``ValueError`` unless they are ones validated when set."""
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError("group configs must map names to strings")
    try:  # what was valid when set stays loadable whatever the gateway's settings are now
        check_values(data)
    except KafkaError as exc:
        raise ValueError(f"not group configs served here: {exc}") from None
    return dict(data)


def _decoded(raw: bytes) -> dict[str, dict[str, str]]:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the group configs document must be an object")
    return {str(group): _configs_of(configs) for group, configs in data.items()}
