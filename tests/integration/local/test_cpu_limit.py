"""A local job is held to its CPU request and limit, as a pod is (real cgroups, real processes):
its cgroup's weight comes from the request (CPUs × the queue's ``cpu_request_ratio``), its CFS
quota from the limit (its CPUs), and two busy processes under one CPU never get more than one."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from crossdock import service
from crossdock.backends.local import cpulimit
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG, in_ci

pytestmark = [pytest.mark.redis, pytest.mark.celery]

PROBE = r"""
import json, multiprocessing, os, sys, time
from pathlib import Path

def burn(until):
    while time.monotonic() < until:
        pass

line = next(l for l in open("/proc/self/cgroup") if "cpu" in l.split(":")[1].split(",") or l.startswith("0::"))
_, ctl, rel = line.strip().split(":", 2)
base = Path("/sys/fs/cgroup") / (ctl if ctl else "") / rel.lstrip("/")
knobs = {f.name: f.read_text().strip() for f in base.iterdir()
         if f.name in ("cpu.shares", "cpu.cfs_quota_us", "cpu.weight", "cpu.max")}
t0, c0 = time.monotonic(), os.times()
until = t0 + 1.5
procs = [multiprocessing.Process(target=burn, args=(until,)) for _ in range(2)]
for p in procs: p.start()
for p in procs: p.join()
c1 = os.times()
stat = dict(l.split() for l in (base / "cpu.stat").read_text().splitlines())
json.dump({"cgroup": str(base), "knobs": knobs, "throttled": int(stat["nr_throttled"]),
           "cpu_per_wall": (c1.children_user + c1.children_system - c0.children_user - c0.children_system)
                           / (time.monotonic() - t0)}, open(sys.argv[1], "w"))
"""


@pytest.fixture
def crossdock_env(crossdock_env):
    """The suite's config, one more queue whose jobs request half their CPUs and one more pool
    whose node is pinned to this machine's last CPU."""
    second = sorted(os.sched_getaffinity(0))[-1]
    cfg = {**TEST_CONFIG, "queues": {**TEST_CONFIG["queues"], "halved": {
        "priority_class": "training", "pools": ["local"], "cpu_request_ratio": 0.5},
        "pinned": {"priority_class": "training", "pools": ["pinned"]}},
        "pools": {**TEST_CONFIG["pools"], "pinned": {"backend": "local", "nodes": [
            {"name": "cpu1", "cpus": 1, "memory_mib": 1024, "cpuset": str(second)}]}}}
    Path(crossdock_env["CROSSDOCK_CONFIG"]).write_text(yaml.safe_dump(cfg))
    return crossdock_env


@pytest.fixture(autouse=True)
def _needs_a_cpu_cgroup():
    if not cpulimit.controller_here():
        if in_ci():
            pytest.fail("no cgroup cpu controller on this machine under CI=true", pytrace=False)
        pytest.skip("no cgroup cpu controller on this machine")


def probe(cluster, tmp_path: Path, queue: str, cpus: int) -> dict:
    out = tmp_path / f"probe-{queue}.json"
    job, = service.submit(cluster.rt, [JobSpec(command=[sys.executable, "-c", PROBE, str(out)], cpus_per_task=cpus,
                                               queue=queue, workdir=str(tmp_path))])
    done = cluster.wait(job.id, timeout=90)
    assert done.state is JobState.COMPLETED, done
    return json.loads(out.read_text())


def test_a_job_gets_the_weight_of_its_request_and_the_quota_of_its_cpus(cluster, tmp_path):
    seen = probe(cluster, tmp_path, "training", cpus=1)
    knobs = seen["knobs"]
    if "cpu.shares" in knobs:  # cgroup v1
        assert (knobs["cpu.shares"], knobs["cpu.cfs_quota_us"]) == ("1024", "100000"), seen
    else:
        assert (knobs["cpu.weight"], knobs["cpu.max"]) == ("39", "100000 100000"), seen
    assert Path(seen["cgroup"]).name.startswith("crossdock-")
    # two busy processes, one CPU: never more than one between them (on an idle machine they would
    # take two, and the quota throttles them; on a busy one they may get less than one anyway)
    assert seen["cpu_per_wall"] <= 1.1, seen
    assert not Path(seen["cgroup"]).exists()  # removed once the job ended


def test_the_request_is_the_queues_ratio_of_the_cpus(cluster, tmp_path):
    knobs = probe(cluster, tmp_path, "halved", cpus=2)["knobs"]
    assert knobs.get("cpu.shares", knobs.get("cpu.weight")) in ("1024", "39"), knobs  # 2 CPUs x 0.5
    assert knobs.get("cpu.cfs_quota_us", knobs.get("cpu.max", "").split(" ")[0]) == "200000", knobs


AFFINITY = "import os, sys; open(sys.argv[1], 'w').write(','.join(map(str, sorted(os.sched_getaffinity(0)))))"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning to one CPU of two needs two")
def test_a_node_with_a_cpuset_pins_its_jobs(cluster, tmp_path):
    out = tmp_path / "affinity"
    job, = service.submit(cluster.rt, [JobSpec(command=[sys.executable, "-c", AFFINITY, str(out)],
                                               queue="pinned", workdir=str(tmp_path))])
    done = cluster.wait(job.id, timeout=60)
    assert done.state is JobState.COMPLETED and done.nodes == ["cpu1"], done
    assert out.read_text() == str(sorted(os.sched_getaffinity(0))[1])
