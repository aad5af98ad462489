"""The import contracts of pyproject.toml's ``[tool.importlinter]``, checked by ``lint-imports``.

One run per contract, so that a contract kept today is enforced while the ones still broken by
imports not yet moved are expected to fail (``KNOWN_BROKEN`` names each such import; a contract
that starts passing shows as XPASS: drop it from ``KNOWN_BROKEN``).
"""

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

pytest.importorskip("importlinter", reason="import-linter is in the dev extras")

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
BY_ID = {c["id"]: c for c in CONTRACTS}

KNOWN_BROKEN = {
    "layers": ["crossdock.backends.local.supervisor -> crossdock.runtime",
               "crossdock.backends.redis_store.store -> crossdock.settings",
               "crossdock.workers.scheduler -> crossdock.service"],
    "faces-without-adapters": ["crossdock.cli.jobs -> crossdock.backends.local.environment",
                               "crossdock.service -> crossdock.backends.local.backend",
                               "crossdock.service -> crossdock.backends.local.gpus"],
    "pure-core": ["crossdock.queue.config -> crossdock.configfile (the load_config shim, until crossdock/runtime.py"
                  " imports crossdock.configfile.load_config)"],
    "no-dev-in-production": ["crossdock.backends.slurm -> crossdock.dev.slurm",
                             "crossdock.cli.main -> crossdock.dev.k8s", "crossdock.cli.main -> crossdock.dev.slurm"],
}


def lint_imports() -> str:
    script = Path(sys.executable).with_name("lint-imports")
    found = str(script) if script.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.skip("lint-imports is not installed (pip install import-linter)")
    return found


def case(contract_id: str):
    broken = KNOWN_BROKEN.get(contract_id)
    marks = [pytest.mark.xfail(strict=False, reason="imports not yet moved: " + "; ".join(broken))] if broken else []
    return pytest.param(contract_id, marks=marks, id=contract_id)


@pytest.mark.parametrize("contract_id", [case(c["id"]) for c in CONTRACTS])
def test_contract_is_kept(contract_id):
    # this checkout first on the path, whatever crossdock an editable install points at
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    r = subprocess.run([lint_imports(), "--no-cache", "--no-logo", "--contract", contract_id], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"lint-imports --contract {contract_id} failed:\n{r.stdout}\n{r.stderr}"


def test_known_broken_names_real_contracts():
    assert set(KNOWN_BROKEN) <= set(BY_ID)


def test_sim_contract_forbids_every_other_top_level_module():
    top = {f"crossdock.{m.name}" for m in pkgutil.iter_modules(crossdock.__path__)}
    allowed = {"crossdock.queue", "crossdock.sim", "crossdock.gcpause"}
    assert set(BY_ID["sim-on-queue"]["forbidden_modules"]) == top - allowed


def test_sim_contract_covers_the_package_once_it_exists():
    sources = BY_ID["sim-on-queue"]["source_modules"]
    if (ROOT / "crossdock" / "sim" / "__init__.py").exists():
        assert "crossdock.sim" in sources, 'crossdock.sim exists: add "crossdock.sim" to the sim-on-queue sources'
