"""The workers' coordination store answers the gateway's etcd client as etcd does.

Every scenario runs through :class:`EtcdClient` twice: against a real etcd server and
against the store a ``--workers`` parent serves (on a unix socket, as the workers reach
it). What the cluster code relies on (guards on create/mod revision, value and lease,
leases ending and taking their keys along, watches in revision order and a compacted
watch told so) must hold on both, or the workers would not be fenced as a cluster is.
"""

from __future__ import annotations

import os
from contextlib import aclosing

import pytest
import trio

from devkit.etcd_server import EtcdServer
from kafscale.gateway.etcd import Compare, EtcdClient, EtcdError, delete_op, put_op, range_op
from kafscale.gateway.workers.journal import Journal, JournalUnreadable
from kafscale.gateway.workers.kv import Compare as KvCompare
from kafscale.gateway.workers.kv import KeyValueStore
from kafscale.gateway.workers.kv_server import KvServer
from kafscale.gateway.workers.supervisor import private_directory, serve_coordination
from tests.support.httpx_streams import IGNORE_ABANDONED_STREAMS
from tests.support.workers_store import coordination_client

pytestmark = IGNORE_ABANDONED_STREAMS


@pytest.fixture
def private():
    """The parent's private directory of sockets."""
    with private_directory() as directory:
        yield directory


@pytest.fixture(params=["etcd", "workers"])
async def client(request, tmp_path, nursery, private):
    if request.param == "etcd":
        server = EtcdServer(tmp_path).start()
        etcd = EtcdClient([server.endpoint], 5000)
        try:
            yield etcd
        finally:
            await etcd.aclose()
            server.stop()
        return
    async with coordination_client(nursery, tmp_path / "coordination", private) as etcd:
        yield etcd


async def test_puts_reads_and_prefix_ranges(client):
    assert await client.get("/a/missing") is None
    await client.put("/a/1", b"one")
    await client.put("/a/2", b"two")
    await client.put("/b/1", b"other")
    first = await client.get("/a/1")
    assert first is not None and first.value == b"one" and first.create_revision == first.mod_revision
    await client.put("/a/1", b"uno")
    again = await client.get("/a/1")
    assert again is not None and again.create_revision == first.create_revision
    assert again.mod_revision > first.mod_revision
    found, revision = await client.range_prefix("/a/")
    assert [(kv.key, kv.value) for kv in found] == [("/a/1", b"uno"), ("/a/2", b"two")]
    assert revision >= again.mod_revision
    await client.delete("/a/1")
    assert [kv.key for kv in await client.get_prefix("/a/")] == ["/a/2"]


async def test_guarded_transactions(client):
    created, _ = await client.txn([Compare("/k", "CREATE", 0)], [put_op("/k", b"v1")])
    assert created
    again, answers = await client.txn([Compare("/k", "CREATE", 0)], [put_op("/k", b"v2")], [range_op("/k")])
    assert not again and answers[0][0].value == b"v1"  # the failure branch read what holds
    current = await client.get("/k")
    assert current is not None
    stale, _ = await client.txn([Compare("/k", "MOD", current.mod_revision - 1)], [put_op("/k", b"stale")])
    assert not stale
    fresh, _ = await client.txn([Compare("/k", "MOD", current.mod_revision), Compare("/k", "VALUE", b"v1")],
                                [put_op("/k", b"v3"), put_op("/other", b"x")])
    assert fresh
    k, other = await client.get("/k"), await client.get("/other")
    assert k is not None and other is not None and k.mod_revision == other.mod_revision  # one revision per txn
    missing_value, _ = await client.txn([Compare("/nothing", "VALUE", b"")], [put_op("/nothing", b"x")])
    assert not missing_value  # a value guard on a missing key fails, as in etcd
    removed, _ = await client.txn([Compare("/other", "VALUE", b"x")], [delete_op("/other")])
    assert removed and await client.get("/other") is None


async def test_leases_end_and_take_their_keys(client):
    lease = await client.lease_grant(2)
    await client.put("/brokers/0", b"me", lease)
    guarded, _ = await client.txn([Compare("/brokers/0", "LEASE", lease)], [put_op("/owners/p0", b"0", lease)])
    assert guarded
    assert await client.lease_keepalive(lease) >= 1
    other = await client.lease_grant(10)
    await client.put("/brokers/1", b"you", other)
    await client.lease_revoke(other)
    assert await client.get("/brokers/1") is None
    with trio.fail_after(10):  # no keepalive: etcd ends it within its TTL (and a little)
        while await client.get("/brokers/0") is not None:
            await trio.sleep(0.2)
    assert await client.get("/owners/p0") is None
    assert await client.lease_keepalive(lease) == 0
    with pytest.raises(EtcdError):
        await client.put("/late", b"x", lease)  # a put under an ended lease is refused


async def test_watch_sees_changes_in_order_from_a_revision(client):
    await client.put("/w/0", b"before")
    _, revision = await client.range_prefix("/w/")
    seen: list[tuple[bool, str, bytes]] = []

    async def follow():
        async with aclosing(client.watch_prefix("/w/", revision + 1)) as stream:
            async for events in stream:
                seen.extend((e.deleted, e.kv.key, e.kv.value) for e in events)
                if len(seen) >= 3:
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await client.put("/w/1", b"a")
        await client.put("/elsewhere", b"not watched")
        await client.txn([], [put_op("/w/2", b"b"), delete_op("/w/1")])
        with trio.fail_after(10):
            while len(seen) < 3:
                await trio.sleep(0.05)
    assert seen[0] == (False, "/w/1", b"a")
    assert sorted(seen[1:]) == [(False, "/w/2", b"b"), (True, "/w/1", b"")]


async def _three_writes_then_watch_from_the_first(etcd: EtcdClient, forget) -> None:
    """A watch from a revision the store no longer keeps ends with 'compacted'."""
    for i in range(3):
        await etcd.put("/c/k", str(i).encode())
    await forget()
    with pytest.raises(EtcdError, match="compact"):
        async with aclosing(etcd.watch_prefix("/c/", 1)) as stream:
            async for _ in stream:
                pass


async def test_a_watch_from_a_compacted_revision_is_cancelled_on_etcd(tmp_path):
    server = EtcdServer(tmp_path).start()
    etcd = EtcdClient([server.endpoint], 5000)

    async def compact() -> None:
        _, revision = await etcd.range_prefix("/c/")
        await etcd._call("/v3/kv/compaction", {"revision": str(revision)})

    try:
        await _three_writes_then_watch_from_the_first(etcd, compact)
    finally:
        await etcd.aclose()
        server.stop()


async def test_a_watch_from_a_forgotten_revision_is_cancelled_by_the_workers_store(tmp_path, nursery):
    kv = KeyValueStore(history=2)
    server = KvServer(kv)
    path = str(tmp_path / "kv.sock")
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(8)
    nursery.start_soon(trio.serve_listeners, server.serve, [trio.SocketListener(sock)])
    etcd = EtcdClient([f"unix://{path}"], 5000)

    async def nothing() -> None:  # a history of 2 events has forgotten the first of 3 already
        pass

    try:
        await _three_writes_then_watch_from_the_first(etcd, nothing)
    finally:
        await etcd.aclose()


def test_history_bounded_and_compacted_watch_told():
    kv = KeyValueStore(history=4)
    for i in range(10):
        kv.put(b"/k", str(i).encode())
    assert kv.events_since(1, b"/", b"\0") is None  # forgotten: the watcher reads again
    recent = kv.events_since(kv.revision - 2, b"/", b"\0")
    assert recent is not None and [e.entry.value for e in recent if e.entry] == [b"7", b"8", b"9"]
    assert kv.txn([KvCompare(b"/k", "VERSION", 10)], [], [])[0]


def test_journal_keeps_unleased_keys_and_survives_a_torn_line(tmp_path):
    journal = Journal(tmp_path / "journal")
    revision, data = journal.load()
    kv = KeyValueStore(revision, data, on_change=journal.append)
    kv.put(b"/topics/a", b"catalog")
    lease = kv.grant(5, now=0.0)
    kv.put(b"/brokers/0", b"leased", lease)
    kv.put(b"/topics/b", b"second")
    kv.delete(b"/topics/b")
    journal.close()
    with open(tmp_path / "journal", "ab") as torn:  # a crash mid-write: never answered
        torn.write(b'{"r": 99, "put": {"L3g=": ["eA=="')
    reopened = Journal(tmp_path / "journal")
    revision_after, data_after = reopened.load()
    assert revision_after == kv.revision and set(data_after) == {b"/topics/a"}
    assert data_after[b"/topics/a"].value == b"catalog"
    restarted = KeyValueStore(revision_after, data_after)
    restarted.put(b"/topics/c", b"x")
    assert restarted.get(b"/topics/c").create_revision > kv.revision  # revisions keep growing
    reopened.close()


def test_journal_with_damage_before_its_end_is_refused(tmp_path):
    path = tmp_path / "journal"
    path.write_bytes(b'{"r":1,"put":{}}\nnot json\n{"r":2,"put":{}}\n')
    with pytest.raises(JournalUnreadable):
        Journal(path).load()


async def test_the_socket_is_private(nursery, tmp_path, private):
    endpoint = (await nursery.start(serve_coordination, tmp_path / "coordination", private)).endpoint
    directory = os.path.dirname(endpoint[len("unix://"):])
    assert os.stat(directory).st_mode & 0o077 == 0


async def test_malformed_calls_are_refused_and_the_store_goes_on(nursery, tmp_path, private):
    """Whatever reaches the socket, the parent answers 4xx or closes that connection; it
    never ends (its end would take every worker along)."""
    import httpx

    endpoint = (await nursery.start(serve_coordination, tmp_path / "coordination", private)).endpoint
    transport = httpx.AsyncHTTPTransport(uds=endpoint[len("unix://"):])
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        bad = [("/v3/kv/txn", b'{"compare": ["not an object"]}'), ("/v3/kv/txn", b'{"success": [{"request_x": {}}]}'),
               ("/v3/kv/put", b'{"key": "%%%", "value": "x"}'), ("/v3/kv/range", b"not json"),
               ("/v3/lease/revoke", b'{"ID": "12345"}'), ("/v3/kv/put", b'{"key": "a2V5", "lease": "77"}'),
               ("/v3/unknown", b"{}")]
        for path, body in bad:
            answer = await http.post(path, content=body)
            assert 400 <= answer.status_code < 500, (path, answer.status_code, answer.text)
    oversized = await trio.open_unix_socket(endpoint[len("unix://"):])
    await oversized.send_all(b"POST /v3/kv/put HTTP/1.1\r\nhost: x\r\ncontent-length: 6000000\r\n\r\n")
    with trio.fail_after(10):  # over the body limit: the connection ends, unanswered
        with pytest.raises(trio.BrokenResourceError):
            while True:
                await oversized.send_all(b"x" * 65536)
    await oversized.aclose()
    etcd = EtcdClient([endpoint], 5000)
    try:
        await etcd.put("/still", b"serving")
        found = await etcd.get("/still")
        assert found is not None and found.value == b"serving"
    finally:
        await etcd.aclose()


async def test_the_leases_of_a_process_that_exited_end_at_once(nursery, tmp_path, private):
    """The store knows which process took each lease (SO_PEERCRED); the parent, seeing a
    worker exit, ends them without waiting out their TTL. Others' leases stay."""
    coordination = await nursery.start(serve_coordination, tmp_path / "coordination", private)
    etcd = EtcdClient([coordination.endpoint], 5000)
    try:
        mine = await etcd.lease_grant(60)
        await etcd.put("/brokers/0", b"me", mine)
        assert coordination.server.end_leases_of(os.getpid() + 1) == 0  # another process's: nothing
        assert await etcd.get("/brokers/0") is not None
        assert coordination.server.end_leases_of(os.getpid()) == 1
        assert await etcd.get("/brokers/0") is None
        assert await etcd.lease_keepalive(mine) == 0
    finally:
        await etcd.aclose()
