"""A service end to end on the local backend: real HTTP replicas (crossdock.jobtools.demo_server
jobs placed by the scheduling loop, run by the worker and their supervisors) behind the router,
scaled by the leader's controller from the router's traffic samples, under an open-loop load that
steps 10 → 200 → 20 QPS (crossdock.dev.loadgen), each step lasting until what it waits for is there:

- at 10 QPS one replica; at 200 the controller asks for ceil(QPS / target) and that many become
  ready (one more at most, never runaway);
- at 20 it goes back to one, and no request fails while the extra replicas drain and stop (each
  one stopped was drained).

How fast each step is followed, and p95 under the step against fixed replicas, are measured by
bench/bench_services.py; the scale-down stabilization is the controller's unit tests' (a driven clock).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest
import yaml

from crossdock.dev.loadgen import LoadRun, Step
from crossdock.dev.servicewatch import Timeline
from crossdock.queue.serving import ServiceSpec
from crossdock.queue.states import JobState
from crossdock.settings import current_user
from crossdock.workers.routes import router_part
from tests.conftest import TEST_CONFIG
from tests.waiting import eventually

pytestmark = [pytest.mark.services, pytest.mark.redis, pytest.mark.celery]

TARGET_QPS = 60  # 10 → 1 replica, 200 → 4 (3.33: far from a rounding edge), 20 → 1
QPS = (10, 200, 20)
INTERVAL, WINDOW, STABILIZATION = 0.5, 2.0, 8.0
ROOT = Path(__file__).resolve().parents[3]
SERVER = [sys.executable, "-m", "crossdock.jobtools.demo_server", "--service-ms", "20", "--concurrency", "4"]


@pytest.fixture
def services_config(crossdock_env, tmp_path):
    cfg = {**TEST_CONFIG,
           "pools": {"local": {"backend": "local", "nodes": [{"name": "localhost", "cpus": 16, "memory_mib": 16384}]}},
           "services": {"interval_seconds": INTERVAL, "router": {"window_seconds": WINDOW, "probe_seconds": 0.2}}}
    Path(crossdock_env["CROSSDOCK_CONFIG"]).write_text(yaml.safe_dump(cfg))
    return cfg


@pytest.fixture
def stack(services_config, runtime, tmp_path):
    from tests.conftest import Cluster

    cluster = Cluster(runtime, tmp_path)
    router, = router_part(runtime)
    router.start()
    yield cluster, router
    router.stop()
    cluster.close()
    ids = runtime.store.active_ids()  # the replicas' supervisors outlive the loop: stop them
    for job_id in ids:
        runtime.store.cancel(job_id)
    cluster.wait_all(ids, timeout=30)


def test_replicas_follow_a_traffic_step_and_scale_in_loses_no_request(stack, tmp_path):
    cluster, router = stack
    rt = cluster.rt
    services = rt.store.services
    services.put(ServiceSpec(name="chat", user=current_user(), command=SERVER, env={"PYTHONPATH": str(ROOT)},
                             workdir=str(tmp_path),
                             queue="inference", min_replicas=1, max_replicas=6, target_qps=TARGET_QPS,
                             scale_down_stabilization_seconds=STABILIZATION, drain_timeout_seconds=120))
    why = lambda: diagnose(rt, tmp_path) + "\n" + timeline.changes()  # noqa: E731
    timeline = Timeline(services, "chat", time.monotonic()).start()
    eventually("the first replica ready", lambda: ready(services) == 1, 60, why=why)
    url = f"http://{services.get('chat').address}/v1/infer"
    want = [math.ceil(qps / TARGET_QPS) for qps in QPS]
    assert want == [1, 4, 1]

    # 10 QPS: one replica
    since = len(timeline.points)
    quiet = LoadRun(url, [Step(QPS[0], 4)]).start().wait()
    assert quiet.failures() == [] and {p.desired for p in timeline.points[since:]} == {1}, timeline.changes()

    # 200 QPS, for as long as it takes: four replicas asked for, and ready (one more at most: a
    # shared machine's open-loop bursts may read above 240 QPS for a window, never runaway)
    step = LoadRun(url, [Step(QPS[1], 600)]).start()
    eventually("four replicas asked for and ready",
               lambda: services.get("chat").status.desired >= want[1] and ready(services) >= want[1], 300, why=why)
    step.stop.set()
    step.wait()
    assert max(p.desired for p in timeline.points) <= want[1] + 1, timeline.changes()

    # 20 QPS until one replica is left and the others' jobs have ended: no request failed while
    # they drained and stopped, and each stopped once drained (the stabilization window's timing
    # is the controller's unit tests'; how long each step takes, bench/bench_services.py's)
    def extra_stopped():
        extra = [j for j in rt.store.get_many(sorted(timeline.jobs)) if j.state is not JobState.RUNNING]
        return services.get("chat").status.desired == 1 and ready(services) == 1 \
            and len(extra) == len(timeline.jobs) - 1 and all(j.state is JobState.CANCELLED for j in extra) and extra

    scale_in = LoadRun(url, [Step(QPS[2], 600)]).start()
    stopped = eventually("back to one replica, the others stopped", extra_stopped, 300, why=why)
    scale_in.stop.set()
    result = scale_in.wait()
    timeline.close()
    assert result.samples and result.failures() == [], result.failures()[:5]
    assert len(stopped) >= want[1] - want[2]
    messages = [e.get("message", "") for e in services.events("chat", count=1000)]
    for job in stopped:  # drained first, then stopped
        assert any(f"(job {job.id}) stops: drained" in m for m in messages), messages


def ready(services) -> int:
    return sum(e.ready and not e.draining for e in services.endpoints("chat"))


def diagnose(rt, tmp_path: Path) -> str:
    """The service's status and endpoints, its replica jobs and the end of their output."""
    services = rt.store.services
    rec = services.get("chat")
    jobs = rt.store.get_many(services.replica_ids("chat"))
    out = [f"status: {rec.status if rec else None}", f"endpoints: {services.endpoints('chat')}",
           *(f"job {j.id}: {j.state.value} {j.reason} pool={j.pool}" for j in jobs)]
    for f in sorted(tmp_path.glob("slurm-*.out"))[-3:]:
        out.append(f"{f.name}: {f.read_text(errors='replace')[-800:]}")
    return "\n".join(out)
