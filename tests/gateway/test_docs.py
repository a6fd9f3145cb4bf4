"""The docs describe what exists: every served API and every option is documented."""

import re
from pathlib import Path

from kafscale.gateway.config import GatewayConfig
from kafscale.gateway.handlers import advertised_versions
from kafscale.gateway.topic_configs import TOPIC_CONFIGS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_compatibility_table_matches_the_advertised_versions():
    text = (DOCS / "compatibility.md").read_text()
    table = {
        int(key): (int(low), int(high))
        for key, low, high in re.findall(r"^\| (\d+) \| [A-Za-z]+ \| (\d+)–(\d+) \|", text, flags=re.M)
    }
    assert table == {key: (low, high) for key, low, high in advertised_versions()}


def test_every_option_is_documented():
    text = (DOCS / "configuration.md").read_text()
    for item in GatewayConfig.options():
        assert f"`{item.name}`" in text and f"KAFSCALE_{item.name.upper()}" in text, item.name


def test_every_topic_config_is_documented_with_what_it_does_here():
    text = (DOCS / "configuration.md").read_text()
    for spec in TOPIC_CONFIGS.values():
        assert f"| `{spec.name}` |" in text and spec.effect in text, spec.name
