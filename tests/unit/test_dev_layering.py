"""``crossdock.dev`` (local clusters) is imported by no production module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "crossdock"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


PRODUCTION = sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "dev")


@pytest.mark.parametrize("path", PRODUCTION, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_production_module_does_not_import_dev(path):
    dev = sorted(n for n in imported_modules(path) if n == "crossdock.dev" or n.startswith("crossdock.dev."))
    assert not dev, f"{path} imports {dev}"


def test_the_cli_and_the_slurm_backend_load_without_dev():
    code = ("import sys, crossdock.cli.app, crossdock.backends.slurm; "
            "print(sorted(m for m in sys.modules if m.startswith('crossdock.dev')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout
    assert out.strip() == "[]"
