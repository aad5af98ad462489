"""crossdock's sbatch parsing against the real sbatch (``--test-only -v`` creates no job).

Each case: does Slurm accept the value, and what does it normalize it to (time in minutes,
memory in MiB, node count)? crossdock must agree, except for the few values it refuses on
purpose (zero or negative counts and other leftovers Slurm lets through), listed below.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from crossdock.queue.errors import InvalidOption
from crossdock.queue.sbatch import build_spec

pytestmark = pytest.mark.slurm

DELIBERATE = {("--time", "-5"), ("--nodes", "0"), ("--nodes", "-2"), ("--gpus", "0"),
              ("--dependency", "afterok:1,afterany:2?after:3")}
CASES = {
    "--time": "0 -1 1 90 1:30 0:30 0:0 1:2:3 2-0 1- 1-2 1-2:3 1-2:3:4 1:2:3:4 UNLIMITED infinite 5s 1.5 abc 0:90 -5",
    "--mem": "0 1K 1025K 1KB 2G 2GB 1M 1B 1.5G -1 1g 1Gi 500",
    "--mem-per-cpu": "1K 4G 1B",
    "--nodes": "1 2-3 0 3-2 x -2",
    "--cpus-per-task": "1 0 -1 2x",
    "--array": "0-15:4%2 1,3,5-7 5-1 0-1000 0-1001 1001 a-b -1 [0-3] [0-3,5]%2 0-3:0",
    "--dependency": "afterok:1 afterok:1,afterany:2 afterok:1?afterany:2 afterok:1,afterany:2?after:3 after:1+5 "
                    "afterok:1_2 singleton afterok: expand:1 aftercorr:1 afterok:1_[1-3] afterok:1_* afterok:1_[1-3]:2",
    "--gres": "gpu:2 gpu:a100:2 gpu:a100 gpu gpu:0 gpu:a100:0 gpu:a100:x",
    "--gpus": "2 a100:2 0",
    "--signal": "USR1@90 B:TERM 10 R:INT SIGUSR2 usr1 0 FOO USR1@65535 USR1@65536 USR1@x X:USR1",
    "--begin": "now now+1hour now+90 16:00 4:15pm 2030-01-02 2030-01-02T03:04 2030-01-02T03:04:05 midnight noon "
               "teatime fika today tomorrow 0401 04/01/30 blah now+1fortnight 25:00 2030-13-01",
    "--deadline": "now+1hour 2030-01-02T03:04 tomorrow blah",
    "--time-min": "10 1:30 1-0 abc",
    "--tasks-per-node": "2 0 x",
    "--cpus-per-gpu": "2 0 x",
    "--mem-per-gpu": "1G 100 x",
    "--ntasks-per-gpu": "1 0",
    "--get-user-env": "10L 10S",
}
# Options that need a GPU request (and a partition with GPUs) beside them.
WITH_GPUS = ("--gres", "--gpus", "--cpus-per-gpu", "--mem-per-gpu", "--ntasks-per-gpu")
ALONGSIDE = {"--cpus-per-gpu": ["--gpus-per-node=1"], "--mem-per-gpu": ["--gpus-per-node=1"],
             "--ntasks-per-gpu": ["--gpus=1"]}
FIELDS = {"--time": "time", "--mem": "mem", "--mem-per-cpu": "mem-per-cpu", "--nodes": "nodes"}


@pytest.fixture(scope="module")
def slurm_env():
    from crossdock.dev import slurm as dev

    state_dir = os.environ.get("CROSSDOCK_SLURM_DIR")
    dev.up(state_dir)
    return {**os.environ, **dev.read_env(state_dir)}


def slurm(env, option, value):
    args = ["sbatch", "--test-only", "-v", *ALONGSIDE.get(option, []), f"{option}={value}", "--wrap=true"]
    if option in WITH_GPUS:
        args.insert(1, "--partition=gpu-a100")
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, env=env).stderr
    bad = re.search(r"error|fatal|failure: (Invalid|Job dependency|Requested operation)", out)
    field = FIELDS.get(option)
    shown = re.search(rf"sbatch: {re.escape(field)}\s+: (\S+)", out) if field else None
    value = shown.group(1) if shown else None
    if not bad and value is not None:
        value = {"--time": _minutes, "--mem": _mib, "--mem-per-cpu": _mib,
                 "--nodes": lambda t: int(t.split("-")[0])}[option](value)
    return not bad, value


def _minutes(text):
    if text == "UNLIMITED":
        return None
    d, _, hms = text.rpartition("-")
    h, m, _s = map(int, hms.split(":"))
    return (int(d or 0) * 24 + h) * 60 + m


def _mib(text):
    text = text.rstrip("?")
    return int(text.rstrip("GT")) * {"G": 1024, "T": 1 << 20}.get(text[-1], 1)


def ours(option, value):
    try:
        spec = build_spec([*ALONGSIDE.get(option, []), f"{option}={value}", "--wrap=true"]).spec
    except InvalidOption:
        return False, None
    minutes = None if spec.time_limit_seconds is None else spec.time_limit_seconds // 60  # Slurm's unit
    return True, {"--time": minutes, "--mem": spec.mem_per_node_mib,
                  "--mem-per-cpu": spec.mem_per_cpu_mib, "--nodes": spec.nodes}.get(option)


@pytest.mark.parametrize("option,value", [(o, v) for o, vs in CASES.items() for v in vs.split()],
                         ids=lambda x: str(x))
def test_agrees_with_real_sbatch(slurm_env, option, value):
    s_ok, s_val = slurm(slurm_env, option, value)
    o_ok, o_val = ours(option, value)
    same = s_ok == o_ok and (not s_ok or s_val is None or s_val == o_val)
    if (option, value) in DELIBERATE:
        assert not same and s_ok and not o_ok, "a deliberate difference disappeared; drop it from DELIBERATE"
    else:
        assert same, f"sbatch: ok={s_ok} value={s_val}; crossdock: ok={o_ok} value={o_val}"


def test_an_empty_dependency_clears_the_scripts_as_in_sbatch(slurm_env, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --dependency=afterok:999999\ntrue\n")
    out = subprocess.run(["sbatch", "--test-only", "-v", "--dependency=", str(script)], capture_output=True,
                         text=True, timeout=30, env=slurm_env).stderr
    assert re.search(r"sbatch: dependency\s+: $", out, re.M) and "to start at" in out
    assert build_spec(["--dependency="], script.read_text(), str(script)).spec.dependency is None
