"""Slurm's runtime in jobs crossdock runs itself: the SLURM_* variables (crossdock.queue.slurm_env),
srun and scontrol (crossdock.jobtools), for the local backend and in Kubernetes pods' specs.

The srun and scontrol tests run the real executables as processes. kwok runs no containers, so
the Kubernetes half runs the container's exact command and environment as a local process, with
the downward API and ``$(VAR)`` references filled in as the kubelet fills them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.local.environment import job_environment
from crossdock.jobtools import BIN_DIR
from crossdock.queue.config import parse_config
from crossdock.queue.hostlist import compress_hostlist, expand_hostlist
from crossdock.queue.models import ArraySpec, GpuRequest, Job, JobSpec
from crossdock.queue.slurm_env import batch_environment, counts_text, step_environment, task_counts

ROOT = Path(__file__).resolve().parents[2]
CONFIG = parse_config({"priority_classes": {"batch": {"value": 1}}, "pools": {"cpu": {"backend": "k8s"}},
                       "queues": {"batch": {"priority_class": "batch", "pools": ["cpu"]}},
                       "default_queue": "batch"})

SCRIPT = """#!/bin/sh
srun sh -c 'echo "task $SLURM_PROCID/$SLURM_NTASKS local $SLURM_LOCALID node $SLURM_NODEID step $SLURM_STEP_ID"'
srun -n 1 sh -c 'echo "one $SLURM_PROCID/$SLURM_NTASKS step $SLURM_STEP_ID"'
echo "batch $SLURM_NTASKS $SLURM_NTASKS_PER_NODE $SLURM_JOB_NUM_NODES $SLURM_TASKS_PER_NODE $SLURM_PROCID"
scontrol show hostnames | wc -l | tr -d ' '
"""
EXPECTED = sorted(["task 0/2 local 0 node 0 step 0", "task 1/2 local 1 node 0 step 0", "one 0/1 step 1",
                   "batch 2 2 1 2 0", "1"])


def a_job(job_id: int = 7, **spec: Any) -> Job:
    fields: dict[str, Any] = {"name": "parity", "user": "ada", "workdir": "/data", "ntasks": 2, "ntasks_per_node": 2,
                              "env": {"SLURM_SUBMIT_HOST": "login1"}}
    fields.update(spec)
    return Job(id=job_id, spec=JobSpec(**fields), attempts=1, queue="batch", pools=["cpu"], pool="cpu")


def local_env(tmp_path: Path) -> dict[str, str]:
    """A local job's environment; srun's step counter under ``tmp_path`` (the supervisor removes it)."""
    return {**job_environment(a_job(workdir=str(tmp_path)), "localhost", service_env={}), "TMPDIR": str(tmp_path)}


def test_task_layout_is_slurms_block_distribution():
    assert task_counts(5, 2) == [3, 2] and task_counts(4, 2) == [2, 2] and task_counts(1, 2) == [1, 0]
    assert task_counts(3, 2, ntasks_per_node=2) == [2, 1]
    assert counts_text([2, 2, 2, 1]) == "2(x3),1" and counts_text([4]) == "4"


def test_hostlist_compression_round_trips():
    for hosts, text in ((["n1", "n2", "n3", "n7"], "n[1-3,7]"), (["n01", "n02", "n10"], "n[01-02,10]"),
                        (["n8", "n9", "n10"], "n[8-10]"), (["login", "c2", "c1"], "login,c[1-2]")):
        assert compress_hostlist(hosts) == text
        assert sorted(expand_hostlist(text)) == sorted(set(hosts))


def test_batch_environment_carries_what_sbatch_documents():
    job = a_job(gpus=GpuRequest(count=1, type="a100", per="task"), mem_per_node_mib=2048, time_limit_seconds=90,
                cpus_per_task=3, nodes=2)
    env = batch_environment(job, nodes=["c1", "c2"], node="c1", submit_dir="/data", submit_host="login1", uid=1000)
    assert {k: env[k] for k in ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE",
                                "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE",
                                "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
                                "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_PROCID", "SLURM_LOCALID",
                                "SLURM_NODEID", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_TASK", "SLURM_SUBMIT_HOST",
                                "SLURM_SUBMIT_DIR", "SLURM_JOB_PARTITION", "SLURM_MEM_PER_NODE",
                                "SLURM_CLUSTER_NAME", "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_TIME_LIMIT")} == {
        "SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "parity", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_CPUS_PER_TASK": "3", "SLURM_CPUS_ON_NODE": "6",
        "SLURM_JOB_CPUS_PER_NODE": "6(x2)", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "c[1-2]", "SLURM_NODELIST": "c[1-2]", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0", "SLURM_GPUS_ON_NODE": "2", "SLURM_GPUS_PER_TASK": "a100:1",
        "SLURM_SUBMIT_HOST": "login1", "SLURM_SUBMIT_DIR": "/data", "SLURM_JOB_PARTITION": "cpu",
        "SLURM_MEM_PER_NODE": "2048", "SLURM_CLUSTER_NAME": "crossdock", "SLURM_JOB_USER": "ada",
        "SLURM_JOB_UID": "1000", "SLURM_TIME_LIMIT": "2"}
    assert "SLURM_ARRAY_JOB_ID" not in env and "SLURM_NTASKS_PER_NODE" not in batch_environment(
        a_job(ntasks_per_node=None), nodes=["c1"], node="c1", submit_dir="/", submit_host="h")


def test_array_variables():
    job = Job(id=12, spec=JobSpec(command=["true"], array=ArraySpec(task_ids=[0, 4, 8])), array_job_id=10,
              array_task_id=4, attempts=1)
    env = batch_environment(job, nodes=["c1"], node="c1", submit_dir="/", submit_host="h")
    assert [env[f"SLURM_ARRAY_{k}"] for k in ("JOB_ID", "TASK_ID", "TASK_COUNT", "TASK_MIN", "TASK_MAX",
                                              "TASK_STEP")] == ["10", "4", "3", "0", "8", "4"]


def test_step_environment_numbers_tasks_across_nodes():
    env = step_environment({"SLURM_JOB_ID": "7"}, step_id=3, counts=[2, 1], nodes=["c1", "c2"], node_id=1,
                           local_id=0, cpus_per_task=1)
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"], env["SLURM_STEP_ID"],
            env["SLURM_NTASKS"], env["SLURM_STEP_NODELIST"], env["SLURMD_NODENAME"], env["SLURM_GTIDS"]) == (
        "2", "0", "1", "3", "3", "c[1-2]", "c2", "2")


def _run_script(script: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    path = cwd / "job.sh"
    path.write_text(script)
    path.chmod(0o755)
    return subprocess.run([str(path)], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)  # as the local supervisor starts a job


def test_local_job_runs_srun_and_scontrol_from_its_path(tmp_path):
    env = local_env(tmp_path)
    assert env["PATH"].split(os.pathsep)[0] == BIN_DIR
    done = _run_script(SCRIPT, env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == EXPECTED


def test_srun_returns_the_worst_exit_code_and_labels_lines(tmp_path):
    env = local_env(tmp_path)
    done = _run_script("#!/bin/sh\nsrun -l sh -c 'echo hi; exit $((SLURM_PROCID * 3))'\n", env, tmp_path)
    assert done.returncode == 3
    assert sorted(done.stdout.splitlines()) == ["0: hi", "1: hi"]


@pytest.mark.parametrize(("args", "message"), [
    (["-n", "3", "true"], "More processors requested than permitted"),
    (["-N", "2", "true"], "Only allocated 1 nodes asked for 2"),
    ([], "No command given"),
    (["no-such-command-here"], "execve(): no-such-command-here"),
])
def test_srun_refuses_steps_the_allocation_cannot_hold(tmp_path, args, message):
    env = local_env(tmp_path)
    done = subprocess.run([f"{BIN_DIR}/srun", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr


def test_srun_forwards_sigterm_to_every_task(tmp_path):
    env = local_env(tmp_path)
    task = ('trap "echo term > got.$SLURM_PROCID; exit 0" TERM; echo up > up.$SLURM_PROCID; '
            'while :; do sleep 0.05; done')
    proc = subprocess.Popen([f"{BIN_DIR}/srun", "sh", "-c", task], env=env, cwd=tmp_path)
    try:
        _poll(lambda: all((tmp_path / f"up.{i}").exists() for i in range(2)))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert [(tmp_path / f"got.{i}").read_text() for i in range(2)] == ["term\n", "term\n"]
    finally:
        proc.kill()


def test_scontrol_show_hostnames_expands_the_argument_or_the_job_nodelist():
    env = {**os.environ, "SLURM_JOB_NODELIST": "c[1-2],gpu7", "CROSSDOCK_PYTHON": sys.executable}
    out = subprocess.run([f"{BIN_DIR}/scontrol", "show", "hostnames"], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["c1", "c2", "gpu7"]
    out = subprocess.run([f"{BIN_DIR}/scontrol", "show", "hostnames", "n[08-10]"], env=env, capture_output=True,
                         text=True)
    assert out.stdout.split() == ["n08", "n09", "n10"]
    bad = subprocess.run([f"{BIN_DIR}/scontrol", "show", "hostnames", "n[1-"], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "never closed" in bad.stderr


def _poll(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# --- Kubernetes: the pod's command and environment, as the kubelet would run them -----------

def kubelet_env(manifest: dict[str, Any], index: int, pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet makes it: the downward API filled, ``$(VAR)``
    expanded from the variables before, JOB_COMPLETION_INDEX added for Indexed Jobs."""
    pod = manifest["spec"]["template"]
    fields = {"metadata.name": pod_name,
              "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index)}
    env: dict[str, str] = {}
    for e in pod["spec"]["containers"][0]["env"]:
        if "valueFrom" in e:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                    lambda mt: env.get(mt.group(1), mt.group(0)), e["value"])
    if manifest["spec"].get("completionMode") == "Indexed":
        env["JOB_COMPLETION_INDEX"] = str(index)
    return env


def test_kubernetes_pod_runs_the_same_script_with_the_same_output(tmp_path):
    man = m.build(a_job(command=None, script=SCRIPT, workdir=str(tmp_path)), CONFIG)
    env = kubelet_env(man, 0, "cd-7-1-x2b9q")
    assert env["SLURMD_NODENAME"] == env["SLURM_JOB_NODELIST"] == "cd-7-1-x2b9q"
    # what the image provides: a PATH, and crossdock importable by $CROSSDOCK_PYTHON (here: this checkout)
    env.update(PATH=os.environ["PATH"], CROSSDOCK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    done = subprocess.run(man["spec"]["template"]["spec"]["containers"][0]["command"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == EXPECTED


def test_kubernetes_workers_share_hostnames_and_consistent_ranks():
    job = a_job(command=["train"], nodes=2, ntasks=4)
    man = m.build(job, CONFIG)
    pod = man["spec"]["template"]
    svc = m.service(job, owner_uid="uid-1")
    assert pod["spec"]["subdomain"] == svc["metadata"]["name"] == man["metadata"]["name"] == "cd-7-1"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    workers = [kubelet_env(man, i, f"cd-7-1-{i}-abcde") for i in range(2)]
    for i, env in enumerate(workers):
        assert (env["RANK"], env["NODE_RANK"], env["SLURM_NODEID"], env["SLURMD_NODENAME"]) == (
            str(i), str(i), str(i), f"cd-7-1-{i}")
        assert (env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"], env["SLURM_JOB_NODELIST"],
                env["SLURM_TASKS_PER_NODE"], env["SLURM_NTASKS"]) == ("2", "cd-7-1-0", "29500", "cd-7-1-[0-1]",
                                                                      "2(x2)", "4")
    assert {(e["PET_NNODES"], e["PET_NODE_RANK"], e["PET_MASTER_ADDR"]) for e in workers} == {
        ("2", "0", "cd-7-1-0"), ("2", "1", "cd-7-1-0")}


def test_kubernetes_array_pod_runs_as_its_own_task(tmp_path):
    spec = JobSpec(script='#!/bin/sh\necho "$SLURM_JOB_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT"'
                          ' "$(scontrol show hostnames | wc -l | tr -d " ")"\n',
                   array=ArraySpec(task_ids=[3, 5, 9]), workdir=str(tmp_path))
    tasks = [Job(id=100 + t, spec=spec, attempts=1, array_job_id=100, array_task_id=t, queue="batch", pools=["cpu"],
                 pool="cpu") for t in (3, 5, 9)]
    man = m.build(tasks[0], CONFIG, array_tasks=tasks)
    env = kubelet_env(man, 1, "cd-a100-1-1-zz9x")
    env.update(PATH=os.environ["PATH"], CROSSDOCK_PYTHON=sys.executable, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    done = subprocess.run(man["spec"]["template"]["spec"]["containers"][0]["command"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "105 100 5 3 1\n"), done.stderr
