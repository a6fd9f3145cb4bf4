"""Background work never ends the gateway: an item that fails (a config it cannot use, a key
the store cannot name, a bug) is logged, counted and skipped, and the other items go on."""

import json

import pytest
import trio
from prometheus_client import generate_latest

from devkit.wire_client import Client, create_topic, start_gateway
from kafscale.gateway.maintenance import MaintenanceFailures, every
from kafscale.protocol import ErrorCode, build_batch
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class
from kafscale.protocol.records import Record

SET = 0


async def test_a_pass_that_raises_is_counted_and_the_loop_goes_on():
    failures = MaintenanceFailures()
    passes = []

    async def one_pass():
        passes.append(1)
        if len(passes) < 3:
            raise TypeError("a bug in one pass")

    with trio.move_on_after(1):
        await every(0.01, "testing", one_pass, failures)
    assert len(passes) > 3 and failures.counts == {"testing": 2}


async def test_cancellation_is_not_swallowed():
    failures = MaintenanceFailures()
    with trio.move_on_after(0.05) as scope:
        with failures.guard("testing", "item"):
            await trio.sleep(10)
    assert scope.cancelled_caught and failures.counts == {}


def _upload_document(topic: str, key: str, upload_id: str) -> bytes:
    return json.dumps(dict(id=upload_id, topic=topic, principal="", bucket="local", key=key, size=3,
                           checksum_alg="sha256", content_type="application/octet-stream", created_ms=0,
                           expires_ms=1, state="open")).encode()


async def test_an_lfs_key_the_store_cannot_name_is_skipped_and_the_others_are_cleaned(nursery, caplog):
    # What an earlier version let CreateTopics store: a prefix that leaves the store's root
    # (the filesystem store's delete raised TypeError, which ended the gateway at every sweep).
    running, _ = await start_gateway(nursery, lfs_sweep_interval_ms=50)
    logs, store = running.context.logs, running.context.logs.store
    for name, prefix in (("bad", "a/../.."), ("good", "")):
        await logs.metadata.create_topic(name, 1, {"kafscale.lfs.enabled": "true", "kafscale.lfs.prefix": prefix})
    meta = f"{running.context.config.storage.namespace}/~meta/lfs"
    await store.put(f"{meta}/bad.json", _upload_document("bad", "a/../../bad/lfs/x", "bad"))
    await store.put(f"{meta}/good.json", _upload_document("good", "kafscale/good/lfs/x", "good"))
    await trio.sleep(0.5)  # several sweeps
    assert not await store.head(f"{meta}/good.json")  # cleaned
    assert await store.head(f"{meta}/bad.json")  # skipped, left for an operator
    assert logs.failures.counts["LFS clean-up"] >= 2  # counted at every pass, logged once
    logged = [r for r in caplog.records if r.name == "kafscale.maintenance" and r.levelname == "ERROR"]
    assert len(logged) == 1 and "bad.json" in logged[0].getMessage() and "InvalidKey" in logged[0].getMessage()
    client = await Client.connect(running.port)  # and the gateway still serves
    body = await client.call(3, 12, build(request_class(3, 12), dict(topics=None, allow_auto_topic_creation=False,
                                                                  include_topic_authorized_operations=False)))
    assert {t.name for t in body.topics} == {"bad", "good"}


async def test_a_topic_config_retention_cannot_use_holds_no_other_topic_up(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    logs = running.context.logs
    # Stored by an earlier version (a null SET became the string "None" at the next load).
    await logs.metadata.create_topic("broken", 1, {"retention.ms": "None"})
    await create_topic(client, "kept", retention_ms="1000")
    for i in range(3):
        old = build_batch([Record(0, 1_000 + i, b"k%d" % i, b"v")])  # timestamps from 1970
        await client.call(0, 9, build(request_class(0, 9), dict(transactional_id=None, acks=-1, timeout=5000,
                                                                  topic_data=[dict(name="kept", partition_data=[
                                                                      dict(index=0, records=old)])])))
        await logs.compactor.pass_once(everything=True)  # one segment each
    for _ in range(2):  # the second pass fails the same way, and is logged once
        assert await logs.enforce_retention() == (2 if _ == 0 else 0)
    assert logs.failures.counts == {"retention": 2}
    assert logs.loaded_log("kept", 0).log_start_offset == 2
    metrics = generate_latest(running.context.metrics.registry).decode()
    assert 'kafscale_maintenance_failures_total{task="retention"} 2.0' in metrics


async def _alter(client, topic, *operations):
    body = await client.call(44, 1, build(request_class(44, 1), dict(resources=[dict(
        resource_type=2, resource_name=topic,
        configs=[dict(name=name, config_operation=op, value=value) for name, op, value in operations])],
        validate_only=False)))
    return body.responses[0].error_code


@pytest.mark.parametrize("prefix", ["a/../..", "..", "a/./b", "a\\b", "a b", "ä"])
async def test_an_lfs_prefix_the_store_cannot_name_is_refused_by_every_alter(nursery, prefix):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await running.context.logs.create_topic("t", 1, {})
    assert await _alter(client, "t", ("kafscale.lfs.prefix", SET, prefix)) == ErrorCode.invalid_config
    body = await client.call(33, 2, build(request_class(33, 2), dict(resources=[dict(
        resource_type=2, resource_name="t", configs=[dict(name="kafscale.lfs.prefix", value=prefix)])],
        validate_only=False)))
    assert body.responses[0].error_code == ErrorCode.invalid_config
    assert running.context.logs.topics()["t"].configs == {}


async def test_a_null_set_is_refused_and_nothing_is_stored(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    await running.context.logs.create_topic("t", 1, {"retention.ms": "1000"})
    assert await _alter(client, "t", ("retention.ms", SET, None)) == ErrorCode.invalid_request
    assert running.context.logs.topics()["t"].configs == {"retention.ms": "1000"}
