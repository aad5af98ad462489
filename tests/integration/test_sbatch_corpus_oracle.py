"""The #SBATCH corpus against the real sbatch: crossdock refuses exactly what sbatch refuses.

``sbatch --test-only`` reads each script on the local Slurm cluster and creates no job. Its own
parse errors (``sbatch: error: Invalid --time specification``, ``sbatch: fatal: …``) come before
any allocation; an "allocation failure" is the local cluster lacking a site's names (accounts,
features, partitions, GPU types) and says the options themselves were read. A script marked
``crossdock-differs`` is one crossdock refuses on purpose, and sbatch must accept it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from crossdock.queue.errors import InvalidOption
from crossdock.queue.sbatch import build_spec

pytestmark = pytest.mark.slurm

CORPUS = sorted((Path(__file__).parents[1] / "data" / "sbatch-corpus").glob("*.sh"))


@pytest.fixture(scope="module")
def slurm_env():
    from crossdock.dev import slurm as dev

    state_dir = os.environ.get("CROSSDOCK_SLURM_DIR")
    dev.up(state_dir)
    return {**os.environ, **dev.read_env(state_dir)}


def sbatch_reads(env, path: Path, tmp_path: Path) -> tuple[bool, str]:
    """Whether sbatch read the script's options, and what it said."""
    out = subprocess.run(["sbatch", "--test-only", "--partition=cpu", str(path)], capture_output=True, text=True,
                         timeout=30, env=env, cwd=tmp_path).stderr
    return not re.search(r"^sbatch: (error|fatal):", out, re.M) or "allocation failure" in out, out


def crossdock_reads(path: Path) -> bool:
    try:
        build_spec([], script_text=path.read_text(), script_path=str(path))
    except InvalidOption:
        return False
    return True


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_crossdock_refuses_what_sbatch_refuses(slurm_env, path, tmp_path):
    slurm_ok, said = sbatch_reads(slurm_env, path, tmp_path)
    differs = re.search(r"^# crossdock-differs: ", path.read_text(), re.M) is not None
    assert crossdock_reads(path) is (slurm_ok and not differs), said
    if differs:
        assert slurm_ok, f"{path.name} says crossdock differs from sbatch, but sbatch refuses it too: {said}"
