"""Start-up failures print one line with the reason and exit 1, not a traceback."""

import subprocess
import sys

import pytest


def _start(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--port", "0", "--http-port", "-1", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_an_unreachable_s3_endpoint(tmp_path):
    line = _one_line(_start("--storage", "s3://nobucket/x", "--s3-endpoint", "http://127.0.0.1:9",
                            "--s3-allow-http", "--s3-path-style", "--s3-retries", "0", "--s3-timeout-ms", "1000",
                            "--s3-access-key-id", "a", "--s3-secret-access-key", "b", "--s3-region", "us-east-1"))
    assert line.startswith("kafscale-gateway: cannot use storage 's3://nobucket/x'")


@pytest.mark.parametrize("content", [b"{not json", b'{"topics": {"t": {"partitions": "many"}}}', b"[]"])
def test_a_corrupt_topic_catalog(tmp_path, content):
    catalog = tmp_path / "data" / "kafscale" / "~meta" / "topics.json"
    catalog.parent.mkdir(parents=True)
    catalog.write_bytes(content)
    line = _one_line(_start("--storage", str(tmp_path / "data")))
    assert "topics.json is unreadable" in line and "move it aside" in line


def test_a_port_in_use(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--port", str(port), "--http-port", "-1",
                               "--storage", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert _one_line(done).startswith("kafscale-gateway: cannot listen on 127.0.0.1")


@pytest.mark.parametrize("args, message", [
    (("--port", "70000"), "port must be <= 65535, got 70000"),
    (("--advertised-port", "85041"), "advertised_port must be <= 65535, got 85041"),
    (("--http-port", "65536"), "http_port must be <= 65535"),
    (("--storage", "foo://x"), "use a path, file:///absolute/path, s3://bucket/prefix or memory://"),
    (("--storage", ""), "no storage location given"),
])
def test_options_out_of_range_exit_2_saying_why(tmp_path, args, message):
    done = _start(*args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_version_and_no_hypothesis_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kafscale.gateway.cli", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("kafscale-gateway 0.")
    # A short run with hypothesis installed (it is, for the tests) leaves only ./data behind.
    process = subprocess.Popen([sys.executable, "-m", "kafscale.gateway.cli", "--port", "0", "--http-port", "-1"],
                               cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "serving Kafka" in line:
                break
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_library_chatter_stays_below_the_gateways_events():
    import logging

    from kafscale.gateway.logsetup import setup_logging

    setup_logging("INFO", "text")
    try:
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("kafscale.server").isEnabledFor(logging.INFO)
    finally:
        logging.getLogger().handlers[:] = []


def test_print_config_shows_each_value_and_where_it_came_from_with_secrets_masked(tmp_path):
    import os
    import tomllib

    config_file = tmp_path / "gateway.toml"
    config_file.write_text('storage = "/srv/data"\nnode_id = 4\nlinger_ms = 7\n')
    done = subprocess.run(
        [sys.executable, "-m", "kafscale.gateway.cli", "--config", str(config_file), "--linger-ms", "9",
         "--print-config"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "KAFSCALE_ETCD_PASSWORD": "hunter2", "KAFSCALE_PORT": "9300"})
    assert done.returncode == 0, done.stderr
    lines = {line.split(" = ")[0]: line for line in done.stdout.splitlines() if " = " in line}
    assert lines["storage"] == f'storage = "/srv/data"  # file {config_file}'
    assert lines["node_id"] == f'node_id = "4"  # file {config_file}'
    assert lines["linger_ms"] == "linger_ms = 9  # flag --linger-ms"  # a flag wins over the file
    assert lines["port"] == "port = 9300  # env KAFSCALE_PORT"
    assert lines["etcd_password"] == 'etcd_password = "***"  # env KAFSCALE_ETCD_PASSWORD'
    assert lines["host"] == 'host = "127.0.0.1"  # default'
    assert "hunter2" not in done.stdout
    # The output is a config file itself (every option, by its name).
    shown = tomllib.loads(done.stdout)
    assert shown["linger_ms"] == 9 and shown["storage"] == "/srv/data" and "http_port" in shown


def test_a_node_id_that_is_neither_auto_nor_a_number_is_a_configuration_error():
    done = _start("--node-id", "first")
    assert done.returncode == 2 and "node_id must be auto or a number" in done.stderr, done.stderr
