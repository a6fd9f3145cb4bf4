import pytest

from kafscale.gateway.config import ConfigError, GatewayConfig, build_parser, load_config


def test_defaults_are_the_embedded_single_node():
    config = load_config([], {})
    assert (config.network.host, config.network.port, config.storage.storage, config.topics.auto_create_topics) == ("127.0.0.1", 9092, "./data", True)
    assert config.network.advertised == ("127.0.0.1", 9092)


def test_workers_auto_is_one_per_core_and_a_worker_knows_its_place():
    import os

    assert load_config(["--workers", "auto"], {}).network.worker_count == len(os.sched_getaffinity(0))
    assert not load_config(["--workers", "3"], {}).network.is_worker
    assert load_config(["--workers", "3", "--worker-slot", "2", "--worker-sockets", "/run/w"], {}).network.is_worker
    with pytest.raises(ConfigError, match="worker_sockets"):  # a worker is started by its parent, with both
        load_config(["--workers", "3", "--worker-slot", "2"], {})
    assert load_config(["--workers", "2", "--storage", "s3://bucket/p", "--etcd-endpoints", "http://e:2379"], {})


def test_precedence_file_then_env_then_flags(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('port = 1000\nlinger_ms = 9\nnamespace = "prod"\nfsync = false\n')
    config = load_config(["--config", str(path), "--port", "3000"], {"KAFSCALE_PORT": "2000", "KAFSCALE_LINGER_MS": "7"})
    assert (config.network.port, config.log.linger_ms, config.storage.namespace, config.storage.fsync) == (3000, 7, "prod", False)


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--port", "abc"], {}, "expected int"),
    ([], {"KAFSCALE_FSYNC": "maybe"}, "expected bool"),
    (["--default-partitions", "0"], {}, "must be >= 1"),
    (["--log-level", "LOUD"], {}, "must be one of"),
    (["--namespace", "a/b"], {}, "namespace"),
    (["--segment-bytes", "2000", "--max-message-bytes", "5000"], {}, "segment_bytes"),
    (["--workers", "many"], {}, "workers must be auto or a number"),
    (["--workers", "0"], {}, "workers must be auto or a number"),
    (["--workers", "2", "--node-id", "3"], {}, "node_id must be auto"),
    (["--workers", "2", "--advertised-port", "9000"], {}, "advertised_port"),
    (["--workers", "2", "--port", "0"], {}, "fixed ports"),
    (["--workers", "2", "--storage", "s3://bucket/p"], {}, "workers on S3 need etcd"),
    (["--workers", "2", "--storage", "memory://"], {}, "cannot share memory"),
])
def test_bad_values_name_the_option(argv, env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(argv, env)


def test_unknown_and_unreadable_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("colour = 'blue'\n")
    with pytest.raises(ConfigError, match="unknown option 'colour'"):
        load_config(["--config", str(bad)], {})
    broken = tmp_path / "broken.toml"
    broken.write_text("port = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(["--config", str(broken)], {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(["--config", str(tmp_path / "none.toml")], {})


def test_every_option_has_help_and_a_flag():
    text = build_parser().format_help()
    for name in (item.name for item in GatewayConfig.options()):
        assert "--" + name.replace("_", "-") in text
        assert "KAFSCALE_" + name.upper() in text


def test_advertised_address_overrides():
    config = load_config(["--advertised-host", "kafka.example", "--advertised-port", "19092"], {})
    assert config.network.advertised == ("kafka.example", 19092)
