"""S3-specific start-up behaviour. The client suites themselves (every codec, restarts,
kill -9 durability, groups, every client) run on S3 too: see the ``storage_args``
fixture in conftest.py, which gives each of them a ``[s3]`` variant on a moto server."""

import pytest

from tests.support.gateway_process import GatewayProcess


def test_missing_bucket_stops_the_gateway_with_a_clear_message(tmp_path, moto_server):
    process = GatewayProcess(tmp_path / "unused", "--storage", "s3://no-such-bucket/x", *moto_server.gateway_args())
    with pytest.raises(RuntimeError) as info:
        process.start(timeout=20)
    assert process.process.returncode == 1
    assert "no-such-bucket" in str(info.value) and "does not exist" in str(info.value)
