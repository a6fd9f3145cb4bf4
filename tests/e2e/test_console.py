"""The status console at / : rendered by headless Chromium, and its figures equal what
kafscale-admin (a Kafka-protocol client) reports of the same gateway."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import console_page
from tests.support.gateway_process import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    process = GatewayProcess(tmp_path_factory.mktemp("console") / "data").start()
    yield process
    process.kill()


def _admin(gateway, *args: str):
    done = subprocess.run([sys.executable, "-m", "kafscale.admin.cli", "-b", gateway.bootstrap, "--json", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_console_shows_what_the_admin_command_reports_and_renders_in_chromium(gateway, tmp_path):
    _admin(gateway, "topics", "create", "invoices", "--partitions", "3")
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(60):
        producer.produce("invoices", value=b"i%d" % i, partition=i % 3)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "accounting",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("invoices", 0, 0), TopicPartition("invoices", 1, 0)])
    read = 0
    while read < 25:
        message = consumer.poll(5)
        assert message is not None
        read += not message.error()
    consumer.commit(asynchronous=False)
    consumer.close()
    tx = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "ledger-writer"})
    tx.init_transactions(10)
    tx.begin_transaction()
    tx.produce("invoices", value=b"pending", partition=2)
    tx.flush(10)

    page = console_page.fetch(gateway.http_port)
    topics = {(row["topic"], int(row["partition"])): row for row in console_page.table(page, "topic")}
    described = _admin(gateway, "topics", "describe", "invoices")
    for partition in described["partitions"]:
        row = topics[("invoices", partition["partition"])]
        assert (int(row["log start"]), int(row["log end"])) == (partition["log_start"], partition["log_end"])
    assert int(topics[("invoices", 2)]["last stable"]) == 20  # the open transaction's first record
    groups = {(row["group"], row["topic"], row["partition"]): row for row in console_page.table(page, "group")}
    admin_group = _admin(gateway, "groups", "describe", "accounting")
    assert admin_group["offsets"], admin_group
    for offset in admin_group["offsets"]:
        row = groups[("accounting", offset["topic"], str(offset["partition"]))]
        assert (int(row["committed"]), int(row["lag"])) == (offset["committed"], offset["lag"])
    (open_txn,) = console_page.table(page, "transactional id")
    assert (open_txn["transactional id"], open_txn["state"]) == ("ledger-writer", "Ongoing")
    (node,) = console_page.table(page, "node")
    assert node["address"] == f"127.0.0.1:{gateway.port}" and node["partitions led"] == str(len(topics))

    # As a person sees it: Chromium renders the page; its text holds the same figures.
    screenshot = tmp_path / "console.png"
    dom = console_page.render_in_chromium(f"http://127.0.0.1:{gateway.http_port}/", screenshot)
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 10_000
    rendered = {(row["topic"], int(row["partition"])): row for row in console_page.table(dom, "topic")}
    assert rendered == topics
    assert "Kafscale gateway, node 0" in dom and 'id="ready" class="ok">ready<' in dom
    tx.abort_transaction(10)
