"""``crossdock demo``'s own config, its Slurm probe and the fragmentation view it prints: the
parts of the demo that need no running service (the demo itself: tests/integration/daytwo)."""

from __future__ import annotations

import io


import pytest
from rich.console import Console

from crossdock.backends.local.backend import local_nodes
from crossdock.backends.registry import catalog
from crossdock.cli.demo import demo_config
from crossdock.cli.demo_steps import local_slurm
from crossdock.cli.render import fragmentation_table
from crossdock.configfile import load_config
from crossdock.settings import DEFAULT_CONFIG

pytestmark = [pytest.mark.daytwo]


@pytest.mark.parametrize("slurm", [False, True], ids=["this-machine", "with-local-slurm"])
def test_the_demo_config_is_the_embedded_default_with_the_queues_and_pools_of_its_steps(tmp_path, slurm):
    cfg = load_config(demo_config(DEFAULT_CONFIG, tmp_path, slurm=slurm), backends=catalog())
    assert {"etl", "web", "gpu"} <= set(cfg.queues) and ("hybrid" in cfg.queues) is slurm
    assert all(q.per_job is None or q.per_job.cpu is None for q in cfg.queues.values())  # step 3 takes the machine
    if slurm:
        assert cfg.queues["hybrid"].pools == ["local", "hpc"] and cfg.pools["hpc"].partition == "cpu"
    gpus = [n for n in local_nodes(cfg, None) if n.pool == "gpu"]
    assert [(n.name, len(n.gpus), {g.model for g in n.gpus}) for n in gpus] == [("gpu-a", 4, {"A100"}),
                                                                               ("gpu-b", 4, {"A100"})]


def test_without_a_local_slurm_env_file_the_probe_says_which_file_it_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSDOCK_SLURM_ENV", str(tmp_path / "slurm" / "env"))
    probe = local_slurm()
    assert probe.env_file is None and f"{tmp_path / 'slurm' / 'env'} does not exist" in probe.why


def test_the_fragmentation_view_shows_each_gpus_job_and_what_the_free_ones_take():
    gpus = lambda node, jobs: [{"id": f"{node}:{k}", "model": "A100", "job": j} for k, j in enumerate(jobs)]  # noqa: E731
    pools = [{"pool": "gpu", "backend": "local",
              "nodes": [{"name": "gpu-a", "gpus": gpus("gpu-a", [31, 32, 33, 33])},
                        {"name": "gpu-b", "gpus": gpus("gpu-b", [None, None, 34, None])},
                        {"name": "cpu-only", "gpus": []}],
              "gpu_models": {"A100": {"total": 8, "used": 5, "free": 3, "largest_free_block": 2,
                                      "fits": {"1": 3, "2": 1, "4": 0, "8": 0}}}}]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(fragmentation_table(pools))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert "gpu   gpu-a  31 32 33 33" in lines and "gpu   gpu-b   ·  · 34  ·" in lines
    assert not any("cpu-only" in line for line in lines)  # a node without GPUs is not on a GPU view
    assert any(line.split() == ["gpu", "A100", "5/8", "3", "2", "3", "1", "0", "0"] for line in lines), lines
