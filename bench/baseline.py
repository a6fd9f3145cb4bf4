"""The gateway of an earlier commit, run beside the current one in the same bench run
(``KAFSCALE_BENCH_BASELINE=<git ref> python -m bench broker``), so a change is measured
against what it replaces on the same machine at the same time.

The commit is checked out in a git worktree; a small directory maps its folders under
the ``kafscale`` package (as the installed package does) and the interpreter runs with
``-S`` so this checkout's editable install cannot shadow it; dependencies come from
this environment's site-packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FOLDERS = ("protocol", "storage_backends", "gateway", "spark_connector")


def short(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def gateway_command(ref: str) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, environment) that start ``kafscale.gateway.cli`` as of ``ref``."""
    commit = short(ref)
    base = Path(tempfile.gettempdir()) / f"kafscale-baseline-{commit}"
    worktree, shim = base / "tree", base / "shim"
    if not worktree.exists():
        base.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), commit], cwd=ROOT, check=True,
                       capture_output=True)
    _build_extensions(worktree)
    package = shim / "kafscale"
    if not package.exists():
        package.mkdir(parents=True)
        # The package root stub: package_root/ since 52a7477, kafscale/ before.
        stub = next(p for p in (worktree / "package_root", worktree / "kafscale") if (p / "__init__.py").exists())
        (package / "__init__.py").write_bytes((stub / "__init__.py").read_bytes())
        for folder in _FOLDERS:
            (package / folder).symlink_to(worktree / folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), sysconfig.get_paths()["purelib"]])}
    return [sys.executable, "-S", "-m", "kafscale.gateway.cli"], env


def _build_extensions(worktree: Path) -> None:
    """Compile the commit's C extensions in place (they are not in git; without them its
    protocol code falls back to the pure-Python reference and would be measured slower
    than it is)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    for source in sorted((worktree / "protocol").glob("_*.c")):
        target = source.with_name(source.stem + suffix)
        if not target.exists():
            subprocess.run(["cc", "-shared", "-fPIC", "-O2", f"-I{include}", str(source), "-o", str(target)],
                           check=True)


def versions(current: str) -> list[tuple[str, list[str], dict[str, str] | None]]:
    """``(name, argv prefix, environment)`` of this checkout's gateway (named ``current``) and,
    with ``KAFSCALE_BENCH_BASELINE=<ref>``, of that commit's: what a section runs side by side."""
    found: list[tuple[str, list[str], dict[str, str] | None]] = [
        (f"kafscale {current}", [sys.executable, "-m", "kafscale.gateway.cli"], None)]
    earlier = os.environ.get("KAFSCALE_BENCH_BASELINE")
    if earlier:
        command, env = gateway_command(earlier)
        found.append((f"kafscale {short(earlier)} (before)", command, env))
    return found
