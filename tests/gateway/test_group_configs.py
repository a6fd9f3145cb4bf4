"""Group configs as stored: a lone gateway's document survives a restart and a damaged one
stops the start with its name; etcd keys that do not parse are skipped, the rest served."""

import json

import pytest

from kafscale.gateway.etcd import KeyValue
from kafscale.gateway.groups.configs import EmbeddedGroupConfigs, EtcdGroupConfigs, settings_with
from kafscale.gateway.groups.settings import GroupSettings
from kafscale.gateway.metadata import MetadataUnreadable
from kafscale.gateway.storage import AsyncStore
from kafscale.storage_backends import MemoryBackend


async def test_a_lone_gateways_group_configs_survive_a_restart_and_damage_is_named():
    backend = MemoryBackend()
    configs = EmbeddedGroupConfigs(AsyncStore(backend, 2), "ns")
    await configs.load()
    await configs.set("g", {"consumer.session.timeout.ms": "20000"})
    await configs.set("h", {"consumer.heartbeat.interval.ms": "700"})
    await configs.set("h", {})  # back to the defaults
    again = EmbeddedGroupConfigs(AsyncStore(backend, 2), "ns")
    await again.load()
    assert (again.of("g"), again.of("h")) == ({"consumer.session.timeout.ms": "20000"}, {})
    assert settings_with(GroupSettings(), again.of("g")).consumer_session_timeout_ms == 20_000
    await AsyncStore(backend, 2).put("ns/~meta/group-configs.json", b'{"g": {"consumer.session.timeout.ms": 5}}')
    with pytest.raises(MetadataUnreadable, match="group-configs.json"):
        await EmbeddedGroupConfigs(AsyncStore(backend, 2), "ns").load()


def test_etcd_group_configs_skip_a_key_that_does_not_parse():
    configs = EtcdGroupConfigs(etcd=None, root="/k/")  # type: ignore[arg-type]  (no etcd call is made)

    def kv(group: str, value) -> KeyValue:
        return KeyValue(f"/k/group-configs/{group.encode().hex()}", json.dumps(value).encode(), 1, 1, 0)

    configs.replace([kv("good", {"consumer.heartbeat.interval.ms": "900"}), kv("bad", {"made.up": "1"}),
                     KeyValue("/k/group-configs/zz", b"{}", 1, 1, 0)])
    assert (configs.of("good"), configs.of("bad")) == ({"consumer.heartbeat.interval.ms": "900"}, {})
    configs.apply(kv("good", {}), deleted=True)
    assert configs.of("good") == {}
