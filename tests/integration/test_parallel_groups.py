"""The suite's xdist plumbing (tests/parallel.py), end to end: a small suite run by pytest on two
workers with this repository's conftest as a plugin. Tests sharing a cluster stay on one worker;
the rest spread. (pytest 9.2 silently dropped xdist's own loadgroup grouping: this catches that.)"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SUITE = '''
import os, pathlib, time
import pytest

@pytest.fixture
def k8s_binaries():
    return None

def ran(name):
    with open(os.environ["RAN"], "a") as f:
        f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.2)

@pytest.mark.slurm
@pytest.mark.parametrize("i", range(4))
def test_slurm(i):
    ran(f"slurm-{i}")

@pytest.mark.kubernetes
@pytest.mark.parametrize("i", range(4))
def test_kubernetes(i):
    ran(f"kubernetes-{i}")

@pytest.mark.kubernetes
def test_own_plane(k8s_binaries):
    ran("own-plane")

@pytest.mark.xdist_group("mine")
@pytest.mark.parametrize("i", range(2))
def test_named(i):
    ran(f"mine-{i}")

@pytest.mark.parametrize("i", range(8))
def test_any(i):
    ran(f"any-{i}")
'''


def test_shared_cluster_tests_stay_on_one_worker_and_the_rest_spread(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    ran = tmp_path / "ran.txt"
    env = {**os.environ, "RAN": str(ran), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CROSSDOCK_XDIST_GROUPS", None)  # this run's own controller makes its own
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                        "-n", "2", "--dist", "loadgroup", "-W", "ignore::pytest.PytestUnknownMarkWarning",
                        "test_suite.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    workers = collections.defaultdict(set)
    for line in ran.read_text().split("\n"):
        if line:
            name, worker = line.split()
            workers[name.split("-")[0]].add(worker)
    assert len(ran.read_text().splitlines()) == 19
    for group in ("slurm", "kubernetes", "mine"):
        assert len(workers[group]) == 1, (group, dict(workers))
    assert len(workers["any"]) > 1, dict(workers)  # the ungrouped ones run beside the groups
