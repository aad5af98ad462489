"""A service end to end on the local backend: real HTTP replicas (crossdock.jobtools.demo_server
jobs placed by the scheduling loop, run by the worker and their supervisors) behind the router,
scaled by the leader's controller from the router's traffic samples, under an open-loop load that
steps 10 → 200 → 20 QPS (crossdock.dev.loadgen).

- the controller's desired replicas follow ceil(QPS / target) within the decision window (the
  router's sliding window plus two controller passes), and that many replicas become ready;
- they go back down only once the scale-down stabilization window has passed;
- no request fails while the extra replicas drain and stop (and each one stopped was drained);
- p95 under the step, once the replicas it asked for are ready, against the same load on a fixed
  set of that many replicas.

Windows are short (config ``services.interval_seconds``, ``services.router.window_seconds``, the
service's ``scale_down_stabilization_seconds``) so the whole test takes about a minute.
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

pytestmark = [pytest.mark.services, pytest.mark.redis, pytest.mark.celery]

TARGET_QPS = 60  # 10 → 1 replica, 200 → 4 (3.33: far from a rounding edge), 20 → 1
STEPS = [Step(10, 8), Step(200, 16), Step(20, 22)]
INTERVAL, WINDOW, STABILIZATION = 0.5, 2.0, 8.0
DECISION_WINDOW = WINDOW + 2 * INTERVAL + 3.0
"""From a step to the controller's decision: the router's window fills, a pass sees it (plus
slack for a shared 2-core machine)."""
START_ALLOWANCE = 15.0
"""From the decision to the replicas ready: placed, dispatched, started, probed."""
SETTLE = 2.0
"""After the replicas are ready, what the one replica queued meanwhile takes to drain."""
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


@pytest.mark.serial  # the scaling timeline: decided within the window, at 200 QPS from the load generator
def test_replicas_follow_a_traffic_step_and_scale_in_loses_no_request(stack, tmp_path):
    cluster, router = stack
    rt = cluster.rt
    services = rt.store.services
    services.put(ServiceSpec(name="chat", user=current_user(), command=SERVER, env={"PYTHONPATH": str(ROOT)},
                             workdir=str(tmp_path),
                             queue="inference", min_replicas=1, max_replicas=6, target_qps=TARGET_QPS,
                             scale_down_stabilization_seconds=STABILIZATION, drain_timeout_seconds=30))
    wait_for(lambda: ready(services) == 1, 60, "the first replica ready", lambda: diagnose(rt, tmp_path))
    address = services.get("chat").address
    want = [math.ceil(s.qps / TARGET_QPS) for s in STEPS]
    assert want == [1, 4, 1]

    t0 = time.monotonic()
    timeline = Timeline(services, "chat", t0).start()
    result = LoadRun(f"http://{address}/v1/infer", STEPS).start().wait()
    end = time.monotonic() - t0
    wait_for(lambda: services.get("chat").status.desired == 1 and ready(services) == 1, 30, "back to one replica")
    points = timeline.close()
    shift = result.started - t0
    up_at, down_at = shift + result.step_started(1), shift + result.step_started(2)

    # 10 QPS: one replica; the step to 200: four, decided within the window and ready soon after
    assert {p.desired for p in timeline.between(0, up_at)} == {1}
    decided = timeline.first(lambda p: p.desired == want[1], since=up_at)
    assert decided is not None and decided - up_at <= DECISION_WINDOW, timeline.changes()
    serving = timeline.first(lambda p: p.ready == want[1], since=up_at)
    assert serving is not None and serving - decided <= START_ALLOWANCE, timeline.changes()
    # the HPA's 10 % tolerance holds small noise; a shared 2-core machine's open-loop bursts may
    # still read above 240 QPS for a window (→ 5): one more, never runaway
    assert max(p.desired for p in points) <= want[1] + 1, timeline.changes()

    # 20 QPS: down only after the stabilization window, then to one
    # (the last recommendation of four may come up to a router window before the step: 200 QPS
    # read as 179 for a moment is three; without stabilization it would fall within ~2 s)
    lowered = timeline.first(lambda p: p.desired < want[1], since=down_at)
    assert lowered is not None and lowered - down_at >= STABILIZATION - WINDOW, timeline.changes()
    assert lowered - down_at <= STABILIZATION + DECISION_WINDOW, timeline.changes()

    # no request failed while replicas drained and stopped, and each stopped one had drained
    scale_in = result.select(since=result.step_started(2))
    assert scale_in and result.failures(since=result.step_started(2)) == []
    assert result.success_rate() >= 0.99, result.failures()[:5]
    stopped = [j for j in rt.store.get_many(sorted(timeline.jobs)) if j.state is JobState.CANCELLED]
    assert len(stopped) == want[1] - want[2], [(j.id, j.state) for j in rt.store.get_many(sorted(timeline.jobs))]
    assert all(j.id in timeline.drained for j in stopped), timeline.drained  # drained first, then stopped

    # p95 under the step, once its replicas were ready, against the same load on fixed replicas
    settled = result.p95(step=1, since=serving - shift + SETTLE)
    assert not math.isnan(settled), "no answer under the step once its replicas were ready"
    services.set_override("chat", want[1])
    wait_for(lambda: ready(services) == want[1], 60, "four fixed replicas ready")
    fixed = LoadRun(f"http://{address}/v1/infer", [Step(STEPS[1].qps, 6)]).start().wait()
    assert fixed.failures() == []
    print(f"p95 under the step: {1000 * result.p95(step=1):.0f} ms whole step, {1000 * settled:.0f} ms once"
          f" {want[1]} were ready (+{SETTLE:.0f}s); fixed {want[1]} replicas {1000 * fixed.p95():.0f} ms; decision"
          f" {decided - up_at:.1f}s, ready {serving - up_at:.1f}s after the step; down {lowered - down_at:.1f}s"
          f" after the step down (stabilization {STABILIZATION:.0f}s); run {end:.0f}s")
    assert settled <= max(2 * fixed.p95(), fixed.p95() + 0.1)


def ready(services) -> int:
    return sum(e.ready and not e.draining for e in services.endpoints("chat"))


def wait_for(cond, timeout: float, what: str, why=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s\n{why()}")


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
