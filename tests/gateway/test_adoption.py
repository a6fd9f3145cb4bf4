"""Workers taking over a lone gateway's directory (gateway/workers/adoption.py): what the
lone gateway's stores held is what the cluster's stores read afterwards, through the
workers' real coordination store on its unix socket, and the copy is made once."""

from __future__ import annotations

import pytest

from kafscale.gateway.config import load_config
from kafscale.gateway.groups.configs import EmbeddedGroupConfigs, EtcdGroupConfigs
from kafscale.gateway.groups.store import CommittedOffset, EmbeddedGroupStore, EtcdGroupStore, StoredGroup
from kafscale.gateway.metadata import EmbeddedMetadataStore, EtcdMetadataStore, cluster_root
from kafscale.gateway.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from kafscale.gateway.security.scram import make_credential
from kafscale.gateway.security.store import EmbeddedSecurityStore, EtcdSecurityStore
from kafscale.gateway.storage import AsyncStore
from kafscale.gateway.transactions.store import ABSENT, EmbeddedTransactionStore, EtcdTransactionStore
from kafscale.gateway.workers.adoption import (
    Adoption,
    AdoptionRefused,
    a_lone_gateway_ran_in,
    adopt_lone_gateway,
)
from kafscale.gateway.workers.supervisor import private_directory
from kafscale.protocol.layout import meta_prefix
from kafscale.protocol.transactions import Transaction
from kafscale.storage_backends import LocalBackend
from tests.support.httpx_streams import IGNORE_ABANDONED_STREAMS
from tests.support.workers_store import coordination_client

pytestmark = IGNORE_ABANDONED_STREAMS


@pytest.fixture
async def coordination(tmp_path, nursery):
    with private_directory() as private:
        async with coordination_client(nursery, tmp_path / "coordination", private) as etcd:
            yield etcd


@pytest.fixture
def lone(tmp_path):
    return AsyncStore(LocalBackend(str(tmp_path / "data")), 4)


CONFIG = load_config(["--workers", "2"], {})
ROOT = cluster_root(CONFIG.cluster.etcd_prefix, CONFIG.network.cluster_id)
NAMESPACE = CONFIG.storage.namespace
ACL = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", Operation.READ,
                 Permission.ALLOW)


async def _a_lone_gateways_state(store: AsyncStore) -> dict:
    catalog = EmbeddedMetadataStore(store, NAMESPACE)
    await catalog.load()
    orders = await catalog.create_topic("orders", 3, {"retention.ms": "1000"})
    await catalog.update_topic("orders", log_start={1: 42})
    producer_id = await catalog.allocate_producer_id()
    group = StoredGroup("readers", 7, "consumer", {("orders", 1): CommittedOffset(50, 2, "meta", 1234)})
    await EmbeddedGroupStore(store, NAMESPACE).save(group)
    configs = EmbeddedGroupConfigs(store, NAMESPACE)
    await configs.load()
    await configs.set("readers", {"consumer.session.timeout.ms": "50000"})
    transaction = Transaction("ledger", producer_id, 3, 60000)
    await EmbeddedTransactionStore(store, NAMESPACE).put(transaction, ABSENT)
    security = EmbeddedSecurityStore(store, NAMESPACE)
    await security.load()
    credential = make_credential("SCRAM-SHA-512", "secret")
    await security.alter_user("alice", upsert=[credential])
    await security.add_acls([ACL])
    return {"orders": orders, "producer_id": producer_id, "group": group, "transaction": transaction,
            "credential": credential}


async def test_everything_a_lone_gateway_kept_is_what_the_cluster_reads(coordination, lone, tmp_path):
    state = await _a_lone_gateways_state(lone)
    assert a_lone_gateway_ran_in(tmp_path / "data", NAMESPACE)

    assert await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=True) is Adoption.DONE

    catalog = EtcdMetadataStore(coordination, ROOT)
    await catalog.load()
    orders = catalog.topics()["orders"]
    assert (orders.topic_id, orders.partitions, orders.configs, orders.log_start) == \
        (state["orders"].topic_id, 3, {"retention.ms": "1000"}, {1: 42})
    assert await catalog.allocate_producer_id() > state["producer_id"]  # never handed out twice
    groups = await EtcdGroupStore(coordination, ROOT, CONFIG.cluster.coordinator_slots, lease=lambda: 0).load_all()
    assert groups.groups == [state["group"]] and not groups.damaged
    configs = EtcdGroupConfigs(coordination, ROOT)
    await configs.load()
    assert configs.of("readers") == {"consumer.session.timeout.ms": "50000"}
    stored = await EtcdTransactionStore(coordination, ROOT).get("ledger")
    assert stored is not None and stored.transaction == state["transaction"]
    security = EtcdSecurityStore(coordination, ROOT)
    await security.load()
    assert security.credential("alice", "SCRAM-SHA-512") == state["credential"]
    assert list(security.acls.values()) == [ACL]

    # Once done, never again: a topic the workers delete stays deleted though the lone
    # gateway's catalog still names it.
    await catalog.delete_topic("orders")
    assert await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=True) is Adoption.NOTHING
    await catalog.load()
    assert "orders" not in catalog.topics()


async def test_a_copy_cut_short_is_made_again_and_the_workers_own_store_is_left_alone(coordination, lone):
    state = await _a_lone_gateways_state(lone)
    await coordination.put(ROOT + "adopted-lone-gateway", b"begun")  # a parent killed midway
    await EtcdTransactionStore(coordination, ROOT).put(state["transaction"], ABSENT)  # copied before it died
    assert await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=True) is Adoption.DONE
    catalog = EtcdMetadataStore(coordination, ROOT)
    await catalog.load()
    assert catalog.topics()["orders"].topic_id == state["orders"].topic_id

    # The workers' own directory: their coordination store holds keys and no mark.
    await coordination.delete(ROOT + "adopted-lone-gateway")
    await catalog.delete_topic("orders")
    assert await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=True) is Adoption.NOTHING
    await catalog.load()
    assert "orders" not in catalog.topics()


async def test_no_lone_gateway_nothing_to_copy(coordination, lone, tmp_path):
    assert not a_lone_gateway_ran_in(tmp_path / "data", NAMESPACE)
    assert await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=False) is Adoption.NOTHING
    assert await coordination.get_prefix(ROOT) == []


async def test_a_damaged_group_refuses_the_copy_by_name(coordination, lone):
    await _a_lone_gateways_state(lone)
    await lone.put(meta_prefix(NAMESPACE, "groups") + "broken.json", b"{not json")
    with pytest.raises(AdoptionRefused, match="broken"):
        await adopt_lone_gateway(CONFIG, lone, coordination, lone_data=True)
    # Nothing is half served: the mark says the copy began, so the next start copies again.
    assert (await coordination.get(ROOT + "adopted-lone-gateway")).value == b"begun"
