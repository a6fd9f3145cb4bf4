"""format("kafscale") with lfs.resolve: pointer records read back as their objects (checked), or
with a column naming them; on the filesystem and on S3 (moto, SeaweedFS)."""

from __future__ import annotations

import os
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafscale.lfs_sdk import LfsClient
from kafscale.storage_backends import open_store
from tests.support.gateway_process import GatewayProcess

pytest.importorskip("pyspark", reason="pyspark is a test dependency (kafscale[spark])")

MIB = 1 << 20


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("kafscale-lfs-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(params=["filesystem", "moto", "seaweedfs"])
def stored(request, tmp_path):
    """A topic holding two pointers (objects of 3 and 2 MiB) and a small raw record."""
    args: list[str] = []
    read_options: dict[str, str] = {}
    location = str(tmp_path / "data")
    if request.param != "filesystem":
        server = request.getfixturevalue("moto_server" if request.param == "moto" else "seaweed_server")
        location = server.location()
        args = ["--storage", location, *server.gateway_args()]
        options = server.options()
        read_options = {"s3.endpoint": options.endpoint, "s3.region": "us-east-1",
                        "s3.accessKeyId": options.access_key_id, "s3.secretAccessKey": options.secret_access_key,
                        "s3.pathStyle": "true", "s3.allowHttp": "true"}
    gateway = GatewayProcess(tmp_path / "data", *args).start()
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    admin.create_topics([NewTopic("media", 1, 1, config={"kafscale.lfs.enabled": "true",
                                                         "kafscale.lfs.min_bytes": str(MIB)})])["media"].result(30)
    objects = [os.urandom(3 * MIB), os.urandom(2 * MIB)]
    producer = Producer({"bootstrap.servers": gateway.bootstrap})
    with LfsClient(f"http://127.0.0.1:{gateway.http_port}") as client:
        for index, data in enumerate(objects):
            client.produce("media", data, lambda value, i=index: producer.produce("media", key=b"%d" % i, value=value))
    producer.produce("media", key=b"raw", value=b"small and raw")
    assert producer.flush(30) == 0
    time.sleep(0.5)
    yield location, read_options, objects
    gateway.stop()


def _read(spark, location: str, options: dict[str, str], **more: str):
    reader = spark.read.format("kafscale").option("subscribe", "media")
    for name, value in {**options, **more}.items():
        reader = reader.option(name, value)
    return reader.load(location)


def test_pointers_resolve_to_their_objects(spark, stored):
    location, options, objects = stored
    rows = _read(spark, location, options, **{"lfs.resolve": "bytes"}).orderBy("offset").collect()
    assert [bytes(row.value) for row in rows] == [*objects, b"small and raw"]
    as_stored = _read(spark, location, options).orderBy("offset").collect()
    assert all(bytes(row.value).startswith(b'{"kfs_lfs":1') for row in as_stored[:2])


def test_uri_mode_names_the_objects(spark, stored):
    location, options, _ = stored
    rows = _read(spark, location, options, **{"lfs.resolve": "uri"}).orderBy("offset").collect()
    uris = [row.lfs_uri for row in rows]
    assert uris[2] is None
    scheme = "s3://" if location.startswith("s3://") else "file://"
    assert all(uri.startswith(scheme) and "/media/lfs/" in uri for uri in uris[:2])
    if scheme == "file://":
        assert os.path.getsize(uris[0][len("file://"):]) == 3 * MIB


def test_an_object_above_max_bytes_fails_the_read_with_the_way_out(spark, stored):
    location, options, _ = stored
    with pytest.raises(Exception, match="lfs.resolve=uri"):
        _read(spark, location, options, **{"lfs.resolve": "bytes", "lfs.maxBytes": str(MIB)}).collect()


def test_a_tampered_object_fails_its_check(spark, stored, request):
    location, options, objects = stored
    rows = _read(spark, location, options, **{"lfs.resolve": "uri"}).orderBy("offset").collect()
    uri = rows[1].lfs_uri
    tampered = b"tampered" + objects[1][8:]  # same size, other bytes
    if uri.startswith("file://"):
        with open(uri[len("file://"):], "wb") as file:
            file.write(tampered)
    else:
        bucket, _, key = uri[len("s3://"):].partition("/")
        server = request.getfixturevalue("moto_server" if request.node.callspec.params["stored"] == "moto"
                                         else "seaweed_server")
        open_store(f"s3://{bucket}", s3=server.options()).put(key, tampered)
    with pytest.raises(Exception, match="is not the pointer's"):
        _read(spark, location, options, **{"lfs.resolve": "bytes"}).collect()
