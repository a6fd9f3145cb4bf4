"""Clients older than the v2 record format (Produce v0-2, Fetch v0-3) are refused as Kafka 4
refuses them, while ApiVersions keeps Produce from v0 for librdkafka's codec check; the
refusals of a client reconnecting in a loop are logged once per address and minute."""

import logging
import struct

import pytest

from devkit.wire_client import Client, start_gateway
from kafscale.gateway.log_limits import PerSourceLog
from kafscale.protocol import encode_frame
from kafscale.protocol.entities import build
from kafscale.protocol.messages import request_class


async def test_api_versions_advertises_produce_from_v0_and_serves_it_from_v3(nursery):
    running, _ = await start_gateway(nursery)
    client = await Client.connect(running.port)
    body = await client.call(18, 3, build(request_class(18, 3), dict(client_software_name="t",
                                                                      client_software_version="1")))
    ranges = {key.api_key: (key.min_version, key.max_version) for key in body.api_keys}
    assert ranges[0] == (0, 13) and ranges[1][0] == 4


@pytest.mark.parametrize("key, version", [(0, 0), (0, 2), (1, 0), (1, 3)])
async def test_produce_and_fetch_before_the_v2_format_close_the_connection(nursery, caplog, key, version):
    running, _ = await start_gateway(nursery)
    caplog.set_level(logging.WARNING, "kafscale.connection")
    for _ in range(20):  # pykafka and kafka-go 0.2 reconnect at once, in a loop
        client = await Client.connect(running.port)
        await client.stream.send_all(encode_frame(struct.pack(">hhih", key, version, 7, 1) + b"c" + b"\0" * 16))
        assert await client.receive() is None  # closed, nothing answered
    refused = [r.getMessage() for r in caplog.records if r.name == "kafscale.connection"]
    assert len(refused) == 1, refused
    name = {0: "PRODUCE", 1: "FETCH"}[key]
    assert f"{name} (api key {key}) v{version} is not served" in refused[0]
    assert running.context.metrics.protocol_errors._value.get() == 20


def test_per_source_log_counts_what_it_held_back(caplog):
    now = [0.0]
    limited = PerSourceLog(logging.getLogger("test.limited"), interval_s=60, max_sources=2, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "test.limited")
    assert limited.log("a", "refused %s", 1) and not limited.log("a", "refused %s", 2)
    assert limited.log("b", "refused %s", 3)  # another source is not held back
    now[0] = 61
    assert limited.log("a", "refused %s", 4)
    assert [r.getMessage() for r in caplog.records] == [
        "refused 1", "refused 3", "refused 4 (1 more like it from this source in the last 60 s not logged)"]
    limited.log("c", "x")  # a third source: the oldest is forgotten, memory stays bounded
    assert len(limited._sources) == 2
