"""One contract, run against every backend."""

import os
import threading

import pytest

from kafscale.storage_backends import (
    LocalBackend,
    MemoryBackend,
    ObjectChanged,
    ObjectExists,
    ObjectNotFound,
    ObjectStore,
    Pieces,
    obstore_backend,
    open_store,
)
from kafscale.storage_backends.wrappers import Call, CountingStore, FaultyStore, LatencyStore


@pytest.fixture(params=["memory", "local", "local-nofsync", "local-named", "s3-moto", "s3-seaweedfs", "counting-local",
                        "faulty-memory", "slow-memory"])
def store(request, tmp_path) -> ObjectStore:
    if request.param == "memory":
        return MemoryBackend()
    # The test seams keep the contract: every call reaches the store they wrap, as it was made.
    if request.param == "counting-local":
        return CountingStore(LocalBackend(tmp_path / "data"))
    if request.param == "faulty-memory":
        return FaultyStore(MemoryBackend(), plan=lambda call: None)
    if request.param == "slow-memory":
        return LatencyStore(MemoryBackend(), latency=lambda call: 0.001)
    if request.param == "s3-moto":
        server = request.getfixturevalue("moto_server")
        return open_store(f"s3://{server.create_bucket()}/some/prefix", s3=server.options())
    if request.param == "s3-seaweedfs":
        server = request.getfixturevalue("seaweed_server")
        return open_store(server.location(), s3=server.options())
    if request.param == "local-named":  # a filesystem without O_TMPFILE (overlayfs before Linux 6.6)
        request.getfixturevalue("monkeypatch").setattr(obstore_backend, "_unnamed_files_work", lambda root: False)
    return LocalBackend(tmp_path / "data", fsync=request.param != "local-nofsync")


def test_put_get_head_delete(store):
    store.put("ns/t/0/a", b"hello")
    assert store.get("ns/t/0/a") == b"hello"
    assert store.head("ns/t/0/a").size == 5
    store.put("ns/t/0/a", b"replaced")
    assert store.get("ns/t/0/a") == b"replaced"
    view = store.get_view("ns/t/0/a")
    assert view.readonly and bytes(view) == b"replaced"
    store.delete("ns/t/0/a")
    assert store.head("ns/t/0/a") is None
    with pytest.raises(ObjectNotFound):
        store.get_view("ns/t/0/a")
    store.delete("ns/t/0/a")  # idempotent


def _stream(store, key, chunks):
    stream = store.open_stream(key)
    for chunk in chunks:
        stream.write(chunk)
    stream.close()


def test_a_stream_writes_its_pieces_whole_and_replaces(store):
    chunks = [bytes([i]) * (3 * 2**20 + i) for i in range(5)]  # more than one part of the multipart upload
    stream = store.open_stream("ns/t/lfs/x")
    for chunk in chunks:
        stream.write(chunk)
        assert store.head("ns/t/lfs/x") is None  # nothing visible before close
    stream.close()
    assert store.head("ns/t/lfs/x").size == sum(len(c) for c in chunks)
    assert store.get("ns/t/lfs/x") == b"".join(chunks)
    _stream(store, "ns/t/lfs/x", [b"small"])
    assert store.get("ns/t/lfs/x") == b"small"


def test_an_aborted_stream_leaves_nothing_behind(store):
    stream = store.open_stream("ns/t/lfs/broken")
    stream.write(b"a" * 10 * 2**20)  # past one part: staged in the store already
    stream.abort()
    assert store.head("ns/t/lfs/broken") is None
    assert [info.key for info in store.list("ns/t/lfs/")] == []


def test_delete_many_removes_every_key_missing_ones_included(store):
    keys = [f"ns/~log/w/{i:020d}.kfl" for i in range(1205)]  # more than one S3 DeleteObjects batch
    for key in keys[:1200]:
        store.put(key, b"x")
    store.put("ns/~log/w/keep", b"kept")
    store.delete_many(keys)  # the last five never existed
    assert [info.key for info in store.list("ns/~log/w/")] == ["ns/~log/w/keep"]
    store.delete_many([])


def test_missing_objects(store):
    with pytest.raises(ObjectNotFound):
        store.get("nope")
    with pytest.raises(FileNotFoundError):  # ObjectNotFound is a FileNotFoundError too
        store.get_range("nope", 0, 10)
    assert store.head("nope") is None
    assert store.list("nope/") == []


def test_put_if_absent_has_one_winner(store):
    store.put_if_absent("k", b"first")
    with pytest.raises(ObjectExists):
        store.put_if_absent("k", b"second")
    assert store.get("k") == b"first"


def test_an_object_given_as_pieces_is_written_as_their_bytes_in_order(store):
    frame = bytearray(b"....records-in-a-frame....")
    pieces = Pieces([b"head", memoryview(frame)[4:22], bytearray(b""), b"x" * 70_000, memoryview(b"tail")])
    version = store.put_if_absent("pieces", pieces)
    assert store.get("pieces") == b"head" + bytes(frame[4:22]) + b"x" * 70_000 + b"tail"
    assert pieces.nbytes == len(store.get("pieces"))
    assert version == "" or store.get_versioned("pieces")[1] == version
    many = Pieces(b"%d," % i for i in range(3000))  # more than one writev takes
    store.put_if_absent("many", many)
    assert store.get("many") == b"".join(many)
    with pytest.raises(ObjectExists):
        store.put_if_absent("pieces", Pieces([b"other"]))


def _race(writers: int, write, lost: type[Exception]) -> list[int]:
    """Run ``write(i)`` in ``writers`` threads released at once; the indexes that won."""
    winners = []
    barrier = threading.Barrier(writers)

    def contend(i):
        barrier.wait()
        try:
            write(i)
            winners.append(i)
        except lost:
            pass

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return winners


def test_put_if_absent_race(store):
    winners = _race(8, lambda i: store.put_if_absent("race", b"%d" % i), ObjectExists)
    assert len(winners) == 1
    assert store.get("race") == b"%d" % winners[0]


def test_version_is_the_version_a_versioned_read_gives(store):
    """A merge checks, with one HEAD each, that the segments it read are still as read; a
    conditional write says the version it made (so its writer need not read it back)."""
    assert store.version("v") is None
    created = store.put_if_absent("v", b"first")
    _, first = store.get_versioned("v")
    assert store.version("v") == first == created
    replaced = store.put_if_unchanged("v", b"second, longer", first)
    _, second = store.get_versioned("v")
    assert store.version("v") == second == replaced != first
    assert store.put_if_unchanged("v", b"third", replaced) == store.get_versioned("v")[1]
    store.delete("v")
    assert store.version("v") is None


def test_put_if_unchanged_replaces_only_the_version_read(store):
    store.put_if_absent("seg", b"small")
    data, version = store.get_versioned("seg")
    assert data == b"small"
    store.put_if_unchanged("seg", b"merged, larger", version)
    assert store.get("seg") == b"merged, larger"
    with pytest.raises(ObjectChanged):  # a second writer that read the first version
        store.put_if_unchanged("seg", b"stale", version)
    assert store.get_versioned("seg")[0] == b"merged, larger"
    store.delete("seg")
    with pytest.raises(ObjectChanged):  # gone: never created again by a conditional write
        store.put_if_unchanged("seg", b"stale", version)
    assert store.head("seg") is None
    with pytest.raises(ObjectNotFound):
        store.get_versioned("seg")


def test_put_if_unchanged_race_has_one_winner(store):
    store.put_if_absent("race", b"first")
    _, version = store.get_versioned("race")
    winners = _race(6, lambda i: store.put_if_unchanged("race", b"writer %d" % i, version), ObjectChanged)
    assert len(winners) == 1
    assert store.get("race") == b"writer %d" % winners[0]


def test_ranges(store):
    store.put("r", bytes(range(100)))
    assert store.get_range("r", 10, 20) == bytes(range(10, 20))
    assert store.get_range("r", 90, 200) == bytes(range(90, 100))
    assert store.get_range("r", 100, 200) == b""
    assert store.get_range("r", 5, 5) == b""
    # The same ranges lent from the backend's buffer: read-only, equal, missing objects refused.
    for start, end in ((10, 20), (90, 200), (100, 200), (5, 5)):
        view = store.get_range_view("r", start, end)
        assert isinstance(view, memoryview) and view.readonly
        assert bytes(view) == store.get_range("r", start, end)
    with pytest.raises(ObjectNotFound):
        store.get_range_view("no-such-object", 0, 10)


def test_list_is_sorted_and_prefixed(store):
    keys = [f"ns/t/0/segment-{o:020d}.kfs" for o in (500, 3, 10_000, 42)] + ["ns/u/0/x", "other/y"]
    for key in keys:
        store.put(key, b"x" * len(key))
    listed = store.list("ns/t/0/")
    assert [i.key for i in listed] == sorted(keys[:4])
    assert all(i.size == len(i.key) for i in listed)
    assert [i.key for i in store.list("ns/")] == sorted(keys[:5])


def test_open_store(tmp_path):
    assert isinstance(open_store("memory://"), MemoryBackend)
    local = open_store(str(tmp_path / "d"))
    local.put("a", b"1")
    assert (tmp_path / "d" / "a").read_bytes() == b"1"
    assert open_store(f"file://{tmp_path}/e").describe().endswith("/e")
    with pytest.raises(ValueError, match="unsupported"):
        open_store("ftp://x")


def test_missing_bucket_is_a_clear_error(moto_server):
    from kafscale.storage_backends import StorageError

    store = open_store("s3://no-such-bucket/x", s3=moto_server.options())
    with pytest.raises(StorageError, match="no-such-bucket.*does not exist"):
        store.check()


def test_unreachable_s3_is_a_storage_error_not_a_hang():
    from kafscale.storage_backends import S3Options, StorageUnavailable

    store = open_store("s3://b/x", s3=S3Options(endpoint="http://127.0.0.1:9", allow_http=True, path_style=True,
                                               access_key_id="a", secret_access_key="b", timeout_ms=1000, retries=0))
    with pytest.raises(StorageUnavailable):
        store.put_if_absent("k", b"v")


def test_a_ranged_read_is_one_request(store, monkeypatch):
    """No HEAD before a GET with a range (it made reading a segment's last offset four
    requests at recovery and in Spark planning); only a range past the end asks for one."""
    import obstore

    calls = []
    for name in ("head", "get_range"):
        original = getattr(obstore, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(obstore, name, counted)
    store.put("one", bytes(range(100)))
    assert store.get_range("one", 90, 200) == bytes(range(90, 100))
    assert calls == ["get_range"]
    assert store.get_range("one", 150, 200) == b""
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 0, 10)


def test_a_wrong_secret_is_named_as_such_not_as_a_missing_bucket(seaweed_server):
    """Issue 38 item 12: a wrong S3 secret was reported as a bucket that must exist."""
    import dataclasses

    from kafscale.storage_backends import S3Backend, StorageUnavailable

    wrong = dataclasses.replace(seaweed_server.options(), secret_access_key="not-the-secret", retries=0)
    bucket = seaweed_server.location()[len("s3://"):].split("/")[0]
    with pytest.raises(StorageUnavailable) as refused:
        S3Backend(bucket, "x", wrong).check()
    assert "refused the credentials" in str(refused.value), refused.value
    with pytest.raises(StorageUnavailable) as missing:
        S3Backend("no-such-bucket-here", "x", dataclasses.replace(seaweed_server.options(), retries=0)).check()
    assert "does not exist" in str(missing.value), missing.value


def test_the_seams_count_and_refuse_calls_before_the_store_sees_them():
    counting = CountingStore(MemoryBackend())
    counting.put("ns/a", b"12345")
    assert counting.get("ns/a") == b"12345" and counting.get_range("ns/a", 1, 3) == b"23"
    assert counting.count("put") == 1 and counting.count("get", "get_range") == 2
    assert counting.bytes_read() == 7 and counting.count(key=lambda key: key == "ns/b") == 0
    inner = MemoryBackend()
    refused: list[Call] = []

    def plan(call: Call) -> None:
        if call.operation == "put_if_absent":
            refused.append(call)
            raise ObjectExists(call.key)

    faulty = FaultyStore(inner, plan)
    with pytest.raises(ObjectExists):
        faulty.put_if_absent("ns/c", b"x")
    assert inner.head("ns/c") is None and refused == [Call("put_if_absent", "ns/c", b"x")]


async def test_a_slow_store_holds_a_worker_thread_not_the_event_loop():
    """LatencyStore: 50 ms per PUT, called as the gateway calls a store; meanwhile the event
    loop keeps running other tasks."""
    import trio

    from kafscale.gateway.storage import AsyncStore

    slow = LatencyStore(MemoryBackend(), latency=lambda call: 0.05 if call.operation == "put" else 0.0)
    store = AsyncStore(slow, 4)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.005)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        started = trio.current_time()
        await store.put("k", b"v")
        took = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert took >= 0.05
    assert ticks >= 3  # the loop ran other tasks while the PUT waited
    assert await store.get("k") == b"v"


@pytest.mark.parametrize("unnamed", [True, False], ids=["o_tmpfile", "named-temporary"])
def test_a_local_put_if_absent_leaves_only_its_object(tmp_path, monkeypatch, unnamed):
    """Whichever way the file is made, a winner leaves its object and a loser nothing: no
    temporary names, no stray files (a listing of segments would have to skip them)."""
    if not unnamed:
        monkeypatch.setattr(obstore_backend, "_unnamed_files_work", lambda root: False)
    store = LocalBackend(tmp_path / "data")
    store.put_if_absent("ns/~log/w/1.kfl", Pieces([b"one", b"-two"]))
    with pytest.raises(ObjectExists):
        store.put_if_absent("ns/~log/w/1.kfl", b"loser")
    store.put_if_absent("ns/new/deeper/dir/2.kfl", b"first under a new directory")
    files = sorted(str(p.relative_to(tmp_path / "data")) for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert files == ["ns/new/deeper/dir/2.kfl", "ns/~log/w/1.kfl"]
    assert store.get("ns/~log/w/1.kfl") == b"one-two"
    assert (tmp_path / "data/ns/~log/w/1.kfl").stat().st_mode & 0o777 == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
