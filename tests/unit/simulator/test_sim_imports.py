"""The simulator's import arrows (docs/DESIGN: ``crossdock/sim`` may import ``crossdock.queue``
only, and nothing in the core imports the simulator), and its shipped default trace."""

from __future__ import annotations

import ast
from pathlib import Path

import crossdock
from crossdock.sim.trace import DEFAULT_NODES, DEFAULT_PODS

ROOT = Path(crossdock.__file__).parent


def crossdock_imports(folder: str) -> dict[str, set[str]]:
    """``{file: crossdock modules it imports}`` for every module below ``folder``."""
    out = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = {n for n in names if n.split(".")[0] == "crossdock"}
    return out


def test_the_simulator_imports_only_the_core_and_itself():
    bad = {f: sorted(n for n in names if not n.startswith(("crossdock.queue", "crossdock.sim")))
           for f, names in crossdock_imports("sim").items()}
    assert {f: n for f, n in bad.items() if n} == {}


def test_the_core_does_not_import_the_simulator():
    bad = {f: sorted(n for n in names if n.startswith("crossdock.sim")) for f, names in crossdock_imports("queue").items()}
    assert {f: n for f, n in bad.items() if n} == {}


def test_the_default_trace_ships_inside_the_package():
    for path in (DEFAULT_NODES, DEFAULT_PODS):
        assert path.is_file() and ROOT in path.parents, path
