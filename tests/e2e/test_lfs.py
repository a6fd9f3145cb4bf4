"""Large File Support end to end: real gateways (filesystem, moto, SeaweedFS), the SDK, and
confluent-kafka as the ordinary client that produces and consumes the pointers."""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import time

import httpx
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kafscale.lfs_sdk import LfsClient, LfsError, is_pointer
from kafscale.protocol.lfs import LfsPointer, parse_pointer
from kafscale.storage_backends import open_store
from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_reading import read_to_end

MIB = 1 << 20
_OPEN: list[LfsClient] = []


def _client(gateway: GatewayProcess) -> LfsClient:
    client = LfsClient(f"http://127.0.0.1:{gateway.http_port}")
    _OPEN.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _OPEN:
        _OPEN.pop().close()


def _create_topic(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"kafscale.lfs.enabled": "true", "kafscale.lfs.min_bytes": str(MIB), **configs}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=settings)]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, value: bytes, key: bytes = b"k") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 64 * MIB,
                         "enable.idempotence": False, "retries": 0})
    failures: list = []
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: failures.append(err) if err else None)
    assert producer.flush(60) == 0
    if failures:
        raise KafkaException(failures[0])


def _consume(bootstrap: str, topic: str) -> list[bytes]:
    return [message.value() for message in read_to_end(bootstrap, topic, 1)]


def _write_file(path, size: int) -> str:
    """A file of ``size`` pseudo-random bytes (1 MiB blocks, each different); its sha256."""
    digest = hashlib.sha256()
    seed = os.urandom(MIB)
    with open(path, "wb") as file:
        for index in range(-(-size // MIB)):
            block = (index.to_bytes(8, "big") + seed[8:])[: min(MIB, size - index * MIB)]
            digest.update(block)
            file.write(block)
    return digest.hexdigest()


def _metric(text: str, name: str) -> float:
    """One unlabelled series of a /metrics answer."""
    (value,) = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(params=["filesystem", "moto", "seaweedfs"])
def lfs_gateway(request, tmp_path):
    args: list[str] = ["--lfs-part-bytes", str(16 * MIB)]
    if request.param == "moto":
        server = request.getfixturevalue("moto_server")
        args += ["--storage", server.location(), *server.gateway_args()]
    elif request.param == "seaweedfs":
        server = request.getfixturevalue("seaweed_server")
        args += ["--storage", server.location(), *server.gateway_args()]
    gateway = GatewayProcess(tmp_path / "data", *args).start()
    gateway.backend = request.param
    yield gateway
    gateway.stop()


def test_a_1_gib_file_goes_through_the_sdk_and_comes_back_verified(lfs_gateway, tmp_path):
    """1 GiB uploaded with the SDK, its pointer produced and consumed with confluent-kafka,
    resolved by the SDK with the checksum matching; on S3 the bytes never pass through the
    gateway, whose peak memory stays where it was."""
    gateway = lfs_gateway
    _create_topic(gateway.bootstrap, "films", **{"kafscale.lfs.require_sdk": "true"})
    source = tmp_path / "film.bin"
    expected = _write_file(source, 1 << 30)
    client = _client(gateway)
    client.upload("films", b"warm-up")  # the S3 control client is made (botocore imported) on first use
    rss_before = _peak_rss_mib(gateway.process.pid)
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    client.produce("films", source, lambda value: producer.produce("films", key=b"film", value=value))
    assert producer.flush(30) == 0
    (value,) = _consume(gateway.bootstrap, "films")
    assert is_pointer(value)
    pointer = parse_pointer(value)
    assert pointer.size == 1 << 30 and pointer.checksum == expected and pointer.checksum_alg == "sha256"
    assert pointer.key.split("/")[-6:-4] == ["films", "lfs"]
    digest = hashlib.sha256()
    with client.open(value) as stream:
        for chunk in iter(lambda: stream.read(8 * MIB), b""):
            digest.update(chunk)
    assert digest.hexdigest() == expected
    growth = _peak_rss_mib(gateway.process.pid) - rss_before
    print(f"{gateway.backend}: the gateway's peak RSS grew {growth:.1f} MiB during 1 GiB up and down")
    # The gateway-held store streams through bounded buffers; on S3 nothing passes through.
    assert growth < (64 if gateway.backend == "filesystem" else 16), f"peak RSS grew {growth:.0f} MiB"
    metrics = httpx.get(f"http://127.0.0.1:{gateway.http_port}/metrics", timeout=10).text
    assert _metric(metrics, "kafscale_lfs_upload_bytes_total") == (1 << 30) + len(b"warm-up")
    assert _metric(metrics, "kafscale_lfs_pointer_records_total") == 1


@pytest.mark.parametrize("checksum", ["crc32c", "md5"])
def test_cheaper_checksums_are_selectable(tmp_path, checksum):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        _create_topic(gateway.bootstrap, "docs")
        client = _client(gateway)
        data = os.urandom(3 * MIB)
        pointer = client.upload("docs", data, checksum=checksum, content_type="application/xml")
        assert pointer.checksum_alg == checksum and pointer.content_type == "application/xml"
        document = json.loads(pointer.encode())
        assert document["kfs_lfs"] == 1 and document["checksum_alg"] == checksum and "sha256" not in document
        _produce(gateway.bootstrap, "docs", pointer.encode())
        assert client.read(pointer.encode()) == data
    finally:
        gateway.stop()


def test_small_values_go_as_they_are(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        _create_topic(gateway.bootstrap, "mixed")
        client = _client(gateway)
        sent: list[bytes] = []
        client.produce("mixed", b"small", sent.append)
        assert sent == [b"small"]
        assert client.open(b"small") is None
    finally:
        gateway.stop()


@pytest.fixture
def strict_gateway(tmp_path):
    gateway = GatewayProcess(tmp_path / "data", "--max-message-bytes", str(8 * MIB)).start()
    _create_topic(gateway.bootstrap, "strict", **{"kafscale.lfs.require_sdk": "true"})
    _create_topic(gateway.bootstrap, "other", **{"kafscale.lfs.require_sdk": "true"})
    yield gateway
    gateway.stop()


def _refused(gateway: GatewayProcess, value: bytes, topic: str = "strict") -> str:
    with pytest.raises(KafkaException) as info:
        _produce(gateway.bootstrap, topic, value)
    error = info.value.args[0]
    assert error.code() == 44, error  # POLICY_VIOLATION
    return error.str()


def test_require_sdk_refuses_what_is_not_a_valid_pointer(strict_gateway):
    gateway = strict_gateway
    client = _client(gateway)
    good = client.upload("strict", os.urandom(2 * MIB))
    _refused(gateway, b"x" * (2 * MIB))  # a raw value over min_bytes
    _refused(gateway, b'{"kfs_lfs": 1, "bucket": "local"}')  # malformed: no key, size, checksum
    _refused(gateway, b'{"kfs_lfs": 2, "bucket": "b", "key": "k", "size": 1, "sha256": "00"}')  # unknown version
    missing = LfsPointer(good.bucket, good.key.rsplit("/", 1)[0] + "/01890000-0000-7000-8000-000000000000",
                         5, good.checksum)
    _refused(gateway, missing.encode())
    wrong_size = LfsPointer(good.bucket, good.key, good.size + 1, good.checksum)
    _refused(gateway, wrong_size.encode())
    _refused(gateway, good.encode(), topic="other")  # another topic's object
    assert _consume(gateway.bootstrap, "strict") == []  # nothing refused was stored
    _produce(gateway.bootstrap, "strict", good.encode())
    _produce(gateway.bootstrap, "strict", b"a small raw value")  # below min_bytes: allowed
    assert _consume(gateway.bootstrap, "strict") == [good.encode(), b"a small raw value"]
    metrics = httpx.get(f"http://127.0.0.1:{gateway.http_port}/metrics", timeout=10).text
    assert 'kafscale_lfs_validation_errors_total{reason="produce"} 6.0' in metrics
    assert "kafscale_lfs_head_latency_ms_count 3.0" in metrics  # missing, wrong size, the good one


def _post(gateway: GatewayProcess, path: str, document: dict, auth: tuple[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{gateway.http_port}{path}", json=document, auth=auth, timeout=30)


def test_upload_sessions_refuse_what_does_not_match(strict_gateway):
    gateway = strict_gateway
    base = f"http://127.0.0.1:{gateway.http_port}"
    assert _post(gateway, "/lfs/uploads", {"topic": "nope", "size": 5}).status_code == 404
    assert _post(gateway, "/lfs/uploads", {"topic": "strict", "size": -1}).status_code == 400
    assert _post(gateway, "/lfs/uploads", {"topic": "strict", "size": 5, "checksum": "sha1"}).status_code == 400
    assert _post(gateway, "/lfs/uploads", {"topic": "strict", "size": "5"}).status_code == 400
    assert _post(gateway, "/lfs/uploads", {"size": 5}).status_code == 400
    assert httpx.post(f"{base}/lfs/uploads", content=b"{not json", timeout=10).status_code == 400
    session = _post(gateway, "/lfs/uploads", {"topic": "strict", "size": 5}).json()
    upload = f"{base}{session['urls'][0]}"
    assert httpx.put(upload, content=b"123456", timeout=10).status_code == 400  # more than announced
    session = _post(gateway, "/lfs/uploads", {"topic": "strict", "size": 5}).json()
    assert httpx.put(f"{base}{session['urls'][0]}", content=b"12345", timeout=10).status_code == 200
    wrong = _post(gateway, f"/lfs/uploads/{session['id']}/complete", {"checksum": "00" * 32})
    assert wrong.status_code == 422 and "discarded" in wrong.text
    assert _post(gateway, f"/lfs/uploads/{session['id']}/complete", {"checksum": "00"}).status_code == 404
    assert _post(gateway, "/lfs/uploads/not-an-id/complete", {"checksum": "00"}).status_code == 404
    # Objects are only under the data directory's LFS prefix: nothing refused was kept.
    kept = [p for p in (gateway.data_dir).rglob("*") if "/lfs/" in str(p) and p.is_file() and "~meta" not in str(p)]
    assert kept == []


def test_an_expired_session_is_refused(tmp_path):
    gateway = GatewayProcess(tmp_path / "data", "--lfs-upload-expiry-ms", "1000").start()
    try:
        _create_topic(gateway.bootstrap, "slow")
        session = _post(gateway, "/lfs/uploads", {"topic": "slow", "size": 3}).json()
        time.sleep(1.2)
        late = httpx.put(f"http://127.0.0.1:{gateway.http_port}{session['urls'][0]}", content=b"abc", timeout=10)
        assert late.status_code == 410 and "expired" in late.text
    finally:
        gateway.stop()


def test_orphans_are_deleted_and_nothing_a_pointer_names(tmp_path):
    gateway = GatewayProcess(tmp_path / "data", "--lfs-upload-expiry-ms", "1000", "--lfs-orphan-ms", "1500",
                             "--lfs-sweep-interval-ms", "200").start()
    try:
        _create_topic(gateway.bootstrap, "kept")
        _create_topic(gateway.bootstrap, "dropped")
        _create_topic(gateway.bootstrap, "brief", **{"retention.ms": "2500"})
        client = _client(gateway)
        named = client.upload("kept", b"named by a pointer")
        _produce(gateway.bootstrap, "kept", named.encode())
        orphan = client.upload("kept", b"the producer died before producing")
        abandoned = _post(gateway, "/lfs/uploads", {"topic": "kept", "size": 10}).json()  # never sent
        of_deleted_topic = client.upload("dropped", b"its topic goes")
        _produce(gateway.bootstrap, "dropped", of_deleted_topic.encode())
        past_retention = client.upload("brief", b"its pointer ages out")
        _produce(gateway.bootstrap, "brief", past_retention.encode())
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.delete_topics(["dropped"])["dropped"].result(30)
        session_document = gateway.data_dir / "kafscale" / "~meta" / "lfs" / f"{abandoned['id']}.json"

        def exists(key: str) -> bool:
            return (gateway.data_dir / key).exists()

        assert exists(named.key) and exists(orphan.key) and exists(past_retention.key)
        assert session_document.exists()
        gone = (orphan.key, of_deleted_topic.key, past_retention.key)
        deadline = time.monotonic() + 20
        while (any(exists(key) for key in gone) or session_document.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [key for key in gone if exists(key)] == [] and not session_document.exists()
        time.sleep(1)  # more passes: the named object stays
        assert exists(named.key)
        assert client.read(named.encode()) == b"named by a pointer"
        metrics = httpx.get(f"http://127.0.0.1:{gateway.http_port}/metrics", timeout=10).text
        for reason in ("orphan", "upload_expired", "topic_deleted", "past_retention"):
            assert f'kafscale_lfs_objects_deleted_total{{reason="{reason}"}} 1.0' in metrics, reason
    finally:
        gateway.stop()


def test_a_prefix_override_places_the_objects_and_passes_require_sdk(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        _create_topic(gateway.bootstrap, "scans", **{"kafscale.lfs.prefix": "archive/scans",
                                                     "kafscale.lfs.require_sdk": "true"})
        client = _client(gateway)
        data = os.urandom(2 * MIB)
        pointer = client.upload("scans", data)
        assert pointer.key.startswith("archive/scans/scans/lfs/")
        _produce(gateway.bootstrap, "scans", pointer.encode())
        assert client.read(_consume(gateway.bootstrap, "scans")[0]) == data
    finally:
        gateway.stop()


def test_a_bucket_override_puts_the_objects_in_another_bucket(tmp_path, moto_server):
    gateway = GatewayProcess(tmp_path / "data", "--storage", moto_server.location(),
                             *moto_server.gateway_args()).start()
    try:
        media = moto_server.create_bucket()
        _create_topic(gateway.bootstrap, "photos", **{"kafscale.lfs.bucket": media,
                                                      "kafscale.lfs.require_sdk": "true"})
        client = _client(gateway)
        data = os.urandom(3 * MIB)
        pointer = client.upload("photos", data)
        assert pointer.bucket == media
        assert open_store(f"s3://{media}", s3=moto_server.options()).head(pointer.key).size == len(data)
        _produce(gateway.bootstrap, "photos", pointer.encode())
        assert client.read(_consume(gateway.bootstrap, "photos")[0]) == data
    finally:
        gateway.stop()


def test_topic_configs_through_the_admin_api(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
        admin.create_topics([NewTopic("plain", 1, 1)])["plain"].result(30)
        resource = ConfigResource("topic", "plain")
        described = admin.describe_configs([resource])[resource].result(30)
        assert described["kafscale.lfs.enabled"].value == "false"
        assert described["kafscale.lfs.min_bytes"].value == str(8 * MIB)
        assert _post(gateway, "/lfs/uploads", {"topic": "plain", "size": 5}).status_code == 409
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

        entry = ConfigEntry("kafscale.lfs.enabled", "true", incremental_operation=AlterConfigOpType.SET)
        admin.incremental_alter_configs([ConfigResource("topic", "plain", incremental_configs=[entry])])[
            resource].result(30)
        described = admin.describe_configs([resource])[resource].result(30)
        assert described["kafscale.lfs.enabled"].value == "true"
        assert _post(gateway, "/lfs/uploads", {"topic": "plain", "size": 5}).status_code == 201
        bad = ConfigEntry("kafscale.lfs.min_bytes", "lots", incremental_operation=AlterConfigOpType.SET)
        with pytest.raises(KafkaException):
            admin.incremental_alter_configs([ConfigResource("topic", "plain", incremental_configs=[bad])])[
                resource].result(30)
    finally:
        gateway.stop()


def test_unknown_lfs_routes_and_bad_heads(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        base = f"http://127.0.0.1:{gateway.http_port}"
        assert httpx.get(f"{base}/lfs/nothing", timeout=10).status_code == 404
        assert httpx.get(f"{base}/lfs/objects", params={"bucket": "local", "key": "x"}, timeout=10).status_code == 404
        _create_topic(gateway.bootstrap, "served")
        real = _client(gateway).upload("served", b"an object")
        for bucket, key in [("local", "kafscale/served/lfs/../../../../etc/passwd"),  # out of the topic's prefix
                            ("local", "../kafscale/served/lfs/2026/11/24/x"),
                            ("elsewhere", real.key),  # another bucket
                            ("local", real.key.replace("/served/", "/absent/"))]:  # no such topic
            answer = httpx.get(f"{base}/lfs/objects", params={"bucket": bucket, "key": key}, timeout=10)
            assert answer.status_code == 404, (bucket, key)
        served = httpx.get(f"{base}/lfs/objects", params={"bucket": "local", "key": real.key}, timeout=10)
        assert served.status_code == 200 and served.content == b"an object"
        assert httpx.post(f"{base}/metrics", timeout=10).status_code == 405
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
        with pytest.raises(LfsError):
            _client(gateway).upload("missing-topic", b"x")
    finally:
        gateway.stop()


def _raw_http(port: int, request: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        if not read:
            return b""
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_hostile_http_clients_get_clear_answers_and_hold_nothing(tmp_path):
    """A stalled upload is dropped after http_idle_timeout_ms and keeps nothing; malformed
    heads, lying lengths and oversized heads are answered 4xx; the gateway keeps serving."""
    gateway = GatewayProcess(tmp_path / "data", "--http-idle-timeout-ms", "1000").start()
    try:
        _create_topic(gateway.bootstrap, "hostile")
        port = gateway.http_port
        assert _raw_http(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _raw_http(port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 4")
        body = b'{"topic": "hostile", "size": 5}'
        lying = b"POST /lfs/uploads HTTP/1.1\r\nHost: x\r\nContent-Length: 999\r\n\r\n" + body
        started = time.monotonic()
        answer = _raw_http(port, lying)  # the body never reaches its announced length
        assert time.monotonic() - started < 8 and (answer == b"" or answer.startswith(b"HTTP/1.1 4")), answer
        session = _post(gateway, "/lfs/uploads", {"topic": "hostile", "size": 10 * MIB}).json()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"PUT {session['urls'][0]} HTTP/1.1\r\nHost: x\r\nContent-Length: {10 * MIB}\r\n\r\n".encode()
                         + b"x" * MIB)
            sock.settimeout(10)
            started = time.monotonic()
            answer = sock.recv(65536)  # the gateway gives up on the stalled body
            assert time.monotonic() - started < 8
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
        assert not (gateway.data_dir / session["key"]).exists()
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
        with _client(gateway) as client:
            assert client.read(client.upload("hostile", b"still works").encode()) == b"still works"
    finally:
        gateway.stop()


class _Pipe(io.RawIOBase):
    """A stream with no size to find: not a file, not seekable."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = min(len(buffer), len(self._data), 100_000)
        buffer[:count] = self._data[:count]
        self._data = self._data[count:]
        return count


@pytest.mark.parametrize("backend", ["filesystem", "moto"])
def test_streams_of_unknown_size_upload_part_by_part(tmp_path, request, backend):
    args: list[str] = ["--lfs-part-bytes", str(5 * MIB)]
    if backend == "moto":
        server = request.getfixturevalue("moto_server")
        args += ["--storage", server.location(), *server.gateway_args()]
    gateway = GatewayProcess(tmp_path / "data", *args).start()
    try:
        _create_topic(gateway.bootstrap, "piped")
        client = _client(gateway)
        data = os.urandom(23 * MIB + 17)  # five parts, the last one short
        sent: list[bytes] = []
        client.produce("piped", io.BufferedReader(_Pipe(data)), sent.append)
        pointer = parse_pointer(sent[0])
        assert pointer.size == len(data) and pointer.checksum == hashlib.sha256(data).hexdigest()
        assert client.read(sent[0]) == data
        client.produce("piped", io.BufferedReader(_Pipe(b"short")), sent.append)
        assert sent[1] == b"short"  # below min_bytes: as it is
        exact = os.urandom(MIB)  # exactly min_bytes: uploaded
        client.produce("piped", io.BufferedReader(_Pipe(exact)), sent.append)
        assert client.read(sent[2]) == exact
    finally:
        gateway.stop()


def test_a_store_that_fails_the_pointer_check_is_a_retriable_error(tmp_path):
    """The HEAD of a pointer's object fails (the S3 server is gone): the partition gets
    KAFKA_STORAGE_ERROR, which producers retry, and the gateway stays up."""
    from devkit.s3_server import MotoServer

    (tmp_path / "moto").mkdir()
    server = MotoServer(tmp_path / "moto")
    gateway = GatewayProcess(tmp_path / "data", "--storage", server.location(), *server.gateway_args(),
                             "--s3-retries", "0", "--s3-timeout-ms", "2000").start()
    try:
        _create_topic(gateway.bootstrap, "unstored", **{"kafscale.lfs.require_sdk": "true"})
        client = _client(gateway)
        pointer = client.upload("unstored", b"uploaded before the store went away")
        _produce(gateway.bootstrap, "unstored", b"loads the partition")
        server.stop()
        with pytest.raises(KafkaException) as info:
            _produce(gateway.bootstrap, "unstored", pointer.encode())
        assert info.value.args[0].code() == 56, info.value.args[0]  # KAFKA_STORAGE_ERROR
        assert gateway.process.poll() is None
    finally:
        gateway.stop()
        server.stop()


def _slow_upload(gateway: GatewayProcess, size: int, every_s: float, stop: list) -> socket.socket:
    """An upload that sends its body one byte every ``every_s`` (inside the idle timeout)."""
    session = _post(gateway, "/lfs/uploads", {"topic": "slow", "size": size}).json()
    sock = socket.create_connection(("127.0.0.1", gateway.http_port))
    sock.sendall(f"PUT {session['urls'][0]} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())

    def trickle() -> None:
        for _ in range(size):
            if stop:
                return
            try:
                sock.sendall(b"x")
            except OSError:
                return
            time.sleep(every_s)

    import threading

    threading.Thread(target=trickle, daemon=True).start()
    return sock


def test_slow_uploads_hold_up_no_other_upload_and_are_ended(tmp_path):
    """Issue 38 item 4: 8 clients sending 1 byte every 5 s held every upload worker, and a
    1 KiB upload beside them waited 28-38 s (for ever, had they gone on)."""
    gateway = GatewayProcess(tmp_path / "data").start()
    stop: list = []
    slow = []
    try:
        _create_topic(gateway.bootstrap, "slow")
        slow = [_slow_upload(gateway, 1000, 0.5, stop) for _ in range(10)]
        time.sleep(1)
        started = time.monotonic()
        pointer = _client(gateway).upload("slow", b"f" * 1024)
        elapsed = time.monotonic() - started
        print(f"a 1 KiB upload beside 10 slow ones took {elapsed * 1000:.0f} ms")
        assert elapsed < 1.0, "a fast upload waited on slow ones"
        assert _client(gateway).read(pointer.encode()) == b"f" * 1024
        # Slower than lfs_min_upload_bytes_per_s (1 KiB/s) over 10 s: ended with 408.
        slow[0].settimeout(30)
        answer = b""
        while chunk := slow[0].recv(4096):  # the gateway closes after its answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"lfs_min_upload_bytes_per_s" in answer, answer
        kept = [p for p in (gateway.data_dir / "kafscale" / "slow").rglob("*") if p.is_file()]
        assert len(kept) == 1  # the fast upload's object; nothing of the slow ones
    finally:
        stop.append(True)
        for sock in slow:
            sock.close()
        gateway.stop()


def test_client_mistakes_on_the_http_endpoint_are_4xx_with_a_message(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    base = f"http://127.0.0.1:{gateway.http_port}"
    try:
        _create_topic(gateway.bootstrap, "m")
        dots = httpx.get(f"{base}/lfs/objects", params={"bucket": "local", "key": "kafscale/m/lfs/../../x"}, timeout=10)
        assert dots.status_code in (400, 404) and dots.text, dots.text
        nested = httpx.post(f"{base}/lfs/uploads", content=b"[" * 100_000 + b"]" * 100_000,
                            headers={"content-type": "application/json"}, timeout=10)
        assert nested.status_code in (400, 413) and "JSON" in nested.text, nested.text
        for content_type in ("x" * 10_000, "not a media type", "text/plain\r\nInjected: yes"):
            bad = _post(gateway, "/lfs/uploads", {"topic": "m", "size": 3, "content_type": content_type})
            assert bad.status_code == 400 and "content_type" in bad.text
        assert "Traceback" not in gateway.log_path.read_text()
    finally:
        gateway.stop()


def test_credentials_sent_to_a_gateway_without_users_say_what_to_do(tmp_path):
    gateway = GatewayProcess(tmp_path / "data").start()
    try:
        _create_topic(gateway.bootstrap, "c")
        refused = _post(gateway, "/lfs/uploads", {"topic": "c", "size": 3}, auth=("someone", "secret"))
        assert refused.status_code == 401 and "need no credentials" in refused.text
    finally:
        gateway.stop()
