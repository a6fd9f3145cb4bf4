"""The dependency rules of the layout, checked on every import statement.

protocol/ is sans-io and imports nothing of ours but itself; storage_backends/
never imports the gateway; spark_connector/ never imports the gateway; kafka_client/ and
lfs_sdk/ (which run in users' processes) import only protocol/.
(import-linter cannot see packages mapped with setuptools' package-dir in an
editable install, so the rule is checked here from the source.)
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "protocol": ("kafscale.gateway", "kafscale.storage_backends", "kafscale.spark_connector", "trio", "obstore", "httpx", "socket"),
    "storage_backends": ("kafscale.gateway", "kafscale.spark_connector"),
    "spark_connector": ("kafscale.gateway",),
    "kafka_client": ("kafscale.gateway", "kafscale.storage_backends", "kafscale.spark_connector"),
    # The admin command talks the Kafka protocol only, as any tool of a user's would.
    "admin": ("kafscale.gateway", "kafscale.storage_backends", "kafscale.spark_connector", "trio"),
    # The LFS SDK runs in users' producers and consumers: the pointer format and HTTP only.
    "lfs_sdk": ("kafscale.gateway", "kafscale.storage_backends", "kafscale.spark_connector", "kafscale.kafka_client"),
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


# -- the module graph inside the gateway and the Spark connector ------------------------------

PACKAGE = "kafscale"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _modules(folder: str) -> dict[str, Path]:
    return {_module_of(path): path for path in sorted((ROOT / folder).rglob("*.py"))}


def _imported(path: Path, module: str, known: dict[str, Path]) -> set[str]:
    """Every module of ``known`` that ``path`` imports, wherever the import is (function
    bodies and ``if TYPE_CHECKING`` blocks included: a circle hidden there is still one)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known and name != module)
    return found


def _graph(folders: tuple[str, ...]) -> dict[str, set[str]]:
    known = {name: path for folder in folders for name, path in _modules(folder).items()}
    return {name: _imported(path, name, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("folder", ["gateway", "spark_connector", "protocol", "storage_backends", "kafka_client"])
def test_no_import_cycles(folder):
    assert _cycles(_graph((folder,))) == []


def test_the_graph_sees_a_cycle_hidden_behind_type_checking(tmp_path, monkeypatch):
    """The cycle check itself can fail: a circle closed only under TYPE_CHECKING is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("from .b import B\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _cycles(_graph(("pkg",))) == [["kafscale.pkg.a", "kafscale.pkg.b"]]


# Leaves: modules the rest of the gateway builds on, which import nothing of it above them.
LEAVES = {
    "kafscale.gateway.ownership": set(),
    "kafscale.gateway.etcd": set(),
    "kafscale.gateway.config": set(),
    "kafscale.gateway.storage": set(),
    "kafscale.gateway.log.damage": set(),
    "kafscale.gateway.metrics": set(),
    "kafscale.gateway.budget": set(),
    "kafscale.gateway.log.cache": set(),
}


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaves_import_nothing_of_the_gateway(leaf):
    graph = _graph(("gateway",))
    assert graph[leaf] - LEAVES[leaf] == set()


def test_the_cluster_does_not_import_security_or_request_handling():
    graph = _graph(("gateway",))
    above = ("kafscale.gateway.security", "kafscale.gateway.handlers", "kafscale.gateway.connection",
             "kafscale.gateway.context", "kafscale.gateway.server", "kafscale.gateway.wiring")
    wrong = {(module, target) for module, targets in graph.items() if module.startswith("kafscale.gateway.cluster")
             for target in targets if target.startswith(above)}
    assert wrong == set()


def test_only_the_composition_root_and_the_server_build_the_cluster_member_and_the_gateway():
    users = {path.relative_to(ROOT).as_posix() for path in (ROOT / "gateway").rglob("*.py")
             if "ClusterMember(" in path.read_text() or "LogManager(" in path.read_text()}
    assert users == {"gateway/wiring.py"}


def test_spark_connector_imports_only_protocol_storage_backends_and_the_client_of_ours():
    ours = [(path.relative_to(ROOT).as_posix(), name) for path in sorted((ROOT / "spark_connector").rglob("*.py"))
            for _, name in _imports(path) if name.startswith(PACKAGE + ".")]
    allowed = (f"{PACKAGE}.protocol", f"{PACKAGE}.storage_backends", f"{PACKAGE}.kafka_client")
    assert [(path, name) for path, name in ours if not name.startswith(allowed)] == []


def test_only_the_partition_log_changes_its_state():
    """Maintenance computes what changes and the log applies it (under its own lock): no
    other module assigns to a partition log's attributes or items of them."""
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path.name == "partition_log.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) \
                            and part.value.id == "partition_log":
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} sets partition_log.{part.attr}")
    assert found == []


LOG_ENGINE = "kafscale.gateway.log"


def _reaching_into_the_log(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of the log engine's inner modules from outside it (its face is the package)."""
    inside = LOG_ENGINE + "."
    return {(module, target) for module, targets in graph.items()
            if module != LOG_ENGINE and not module.startswith(inside)
            for target in targets if target.startswith(inside)}


def test_the_log_engine_is_reached_only_through_its_face():
    assert _reaching_into_the_log(_graph(("gateway",))) == set()


def test_the_face_check_sees_an_import_of_an_inner_module():
    """The check itself can fail: a handler importing ``log.partition_log`` is found."""
    graph = {"kafscale.gateway.handlers.produce": {"kafscale.gateway.log.partition_log"},
             "kafscale.gateway.context": {LOG_ENGINE}}
    assert _reaching_into_the_log(graph) == {("kafscale.gateway.handlers.produce",
                                               "kafscale.gateway.log.partition_log")}


# A partition log's parts, which only the log engine reads and changes: its transaction book,
# its maintenance lock, the stored pieces it is made of.
LOG_PARTS = {"book", "_maintenance", "pieces", "redundant", "segment_max_timestamps", "uncompacted_since"}


def _reaches_into_log_parts(source: str, path: str) -> list[str]:
    """Attribute chains ending in, or passing through, a partition log's part: reads,
    assignments, ``del`` and calls alike, whatever the variable is called."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Attribute) and node.attr in LOG_PARTS and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.append(f"{path}:{node.lineno} .{node.attr}")
    return found


def _gateway_sources(outside: str) -> list[tuple[str, str]]:
    """(path, source) of the gateway's modules but those at or under ``outside``."""
    excluded = ROOT / outside
    return [(str(path.relative_to(ROOT)), path.read_text()) for path in sorted((ROOT / "gateway").rglob("*.py"))
            if path != excluded and excluded not in path.parents]


def test_nothing_outside_the_log_engine_reaches_into_a_partition_logs_parts():
    assert [hit for path, source in _gateway_sources("gateway/log") for hit in _reaches_into_log_parts(source, path)] == []


def test_the_parts_check_sees_a_del_and_a_call_through_any_name():
    """The check itself can fail: what the produce handler used to do is found."""
    source = ("del target.book.verification[pid]\n"
              "target.book.state.open.clear()\n"
              "x = ctx.logs.get(t, p).pieces\n")
    assert len(_reaches_into_log_parts(source, "handler.py")) == 3


def _builds_meta_keys(source: str, path: str) -> list[str]:
    """Keys of the ``~meta/`` documents put together outside protocol/layout.py: the
    META_PREFIX name used, or ``~meta`` inside an f-string."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Name) and node.id == "META_PREFIX":
            found.append(f"{path}:{node.lineno} META_PREFIX")
        elif isinstance(node, ast.JoinedStr) and any(
                isinstance(part, ast.Constant) and "~meta" in str(part.value) for part in node.values):
            found.append(f"{path}:{node.lineno} ~meta in an f-string")
    return found


def test_meta_keys_are_built_in_the_layout_module_only():
    found = []
    for folder in ("gateway", "spark_connector", "storage_backends", "lfs_sdk", "admin", "kafka_client"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += _builds_meta_keys(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []
    # The check itself can fail.
    assert len(_builds_meta_keys('key = f"{ns}/~meta/groups/"\nother = f"{ns}/{META_PREFIX}/x"\n', "x.py")) == 2


def _sets_session_state(source: str, path: str) -> list[str]:
    """Assignments and ``del`` of a session's attributes (``session.x`` or ``….session.x``):
    a session changes only through its transitions, in gateway/security/session.py."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if not isinstance(part, ast.Attribute):
                    continue
                owner = part.value
                if (isinstance(owner, ast.Name) and owner.id == "session") or \
                        (isinstance(owner, ast.Attribute) and owner.attr == "session"):
                    found.append(f"{path}:{node.lineno} sets session.{part.attr}")
    return found


def test_a_session_changes_only_through_its_transitions():
    outside = _gateway_sources("gateway/security/session.py")
    assert [hit for path, source in outside for hit in _sets_session_state(source, path)] == []


def test_the_session_check_sees_what_the_sasl_handler_used_to_do():
    """The check itself can fail: the assignments of the mutable record are found."""
    source = ("session.raw_tokens = code == 0\n"
              "ctx.session.closing = True\n"
              "session.principal, session.authenticated = p, True\n"
              "del self.session.exchange\n")
    assert len(_sets_session_state(source, "sasl.py")) == 5


def _store_classes(source: str) -> set[str]:
    return {node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}


def _stores_without_twins(modules: dict[str, str]) -> list[str]:
    """Each etcd store lives beside its embedded twin (``Etcd<Port>`` and ``Embedded<Port>``,
    the port named ``<Port>``): what is missing, per module."""
    found = []
    for module, source in modules.items():
        classes = _store_classes(source)
        for name in sorted(classes):
            if name.startswith("Etcd") and name.endswith("Store"):
                port = name[len("Etcd"):]
                if "Embedded" + port not in classes:
                    found.append(f"{module}: {name} without Embedded{port}")
    return found


def test_each_etcd_store_lives_beside_its_embedded_twin():
    modules = {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / "gateway").rglob("*.py"))}
    assert _stores_without_twins(modules) == []
    etcd_stores = {name for source in modules.values() for name in _store_classes(source)
                   if name.startswith("Etcd") and name.endswith("Store")}
    assert etcd_stores == {"EtcdMetadataStore", "EtcdGroupStore", "EtcdTransactionStore", "EtcdSecurityStore"}
    # The check itself can fail: an etcd store in a module of its own.
    assert _stores_without_twins({"cluster/etcd_metadata.py": "class EtcdGroupStore:\n    pass\n"}) == [
        "cluster/etcd_metadata.py: EtcdGroupStore without EmbeddedGroupStore"]


# Reads of the time of day outside the gateway's clock (gateway/clock.py), and why each may.
_WALL_CLOCK_EXCEPTIONS = {
    "gateway/log/log_writer.py:new_writer_id": "a writer's id, unique and ordered per start to the microsecond: "
                                               "an identity, not a time of day",
}


def _wall_clock_reads(source: str, path: str) -> list[str]:
    """Calls of time.time(), time.time_ns() or datetime's now()/utcnow(), by enclosing function."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and \
                    isinstance(child.func.value, ast.Name) and \
                    (child.func.value.id, child.func.attr) in {("time", "time"), ("time", "time_ns"),
                                                               ("datetime", "now"), ("datetime", "utcnow")}:
                where = f"{path}:{function}"
                if where not in _WALL_CLOCK_EXCEPTIONS:
                    found.append(f"{where} line {child.lineno}")
            visit(child, name)

    visit(ast.parse(source, filename=path), "<module>")
    return found


def test_the_time_of_day_is_read_from_the_one_injected_clock():
    assert [hit for path, source in _gateway_sources("gateway/clock.py") for hit in _wall_clock_reads(source, path)] == []
    # The check itself can fail: what the produce handler used to do.
    assert _wall_clock_reads("def handle():\n    now_ms = int(time.time() * 1000)\n", "gateway/handlers/produce.py") == [
        "gateway/handlers/produce.py:handle line 2"]


def test_tools_import_no_test_module():
    """The benchmarks, the scripts and what they share with the tests (devkit/) stand on their
    own: a test module is not a library."""
    found = [(str(path.relative_to(ROOT)), name)
             for folder in ("bench", "scripts", "devkit") for path in sorted((ROOT / folder).rglob("*.py"))
             for _, name in _imports(path) if name == "tests" or name.startswith("tests.")]
    assert found == []
    # The check itself can fail: it sees a test module's import of tests.support.
    assert any(name.startswith("tests.") for _, name in _imports(ROOT / "tests" / "cluster" / "conftest.py"))
