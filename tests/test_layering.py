"""The dependency rules of the layout, checked on every import statement.

protocol/ is sans-io and imports nothing of ours but itself; storage_backends/
never imports the gateway; spark_connector/ never imports the gateway.
(import-linter cannot see packages mapped with setuptools' package-dir in an
editable install, so the rule is checked here from the source.)
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "protocol": ("kafscale.gateway", "kafscale.storage_backends", "kafscale.spark_connector", "trio", "obstore", "httpx", "socket"),
    "storage_backends": ("kafscale.gateway", "kafscale.spark_connector"),
    "spark_connector": ("kafscale.gateway",),
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layer_does_not_import_forbidden_modules(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"{folder}/ has no modules"
    violations = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in _imports(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[folder])
    ]
    assert violations == []
