"""The autoscaler loop against a real Redis and the fake backend's in-memory fleets and nodes: it
acts on what the plan decided, records one event per change, drains before it removes, marks
pending jobs WaitingForCapacity without the cycle turning them back, and goes on when a backend
is away. The plan is scripted here (the pure plan has its own tests), so every assertion is about
what the loop does with a decision."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from crossdock import service
from crossdock.backends.fake.backend import FakeBackend
from crossdock.queue.autoscale.plan import AutoscalePlan, AutoscaleState, FleetDecision, NodeDecision
from crossdock.queue.models import JobSpec
from crossdock.queue.ports import BackendUnavailable
from crossdock.queue.snapshot import DELETION_CANDIDATE
from crossdock.queue.states import JobState, Reason
from crossdock.runtime import Runtime
from crossdock.workers.leader import Scheduler

pytestmark = [pytest.mark.redis, pytest.mark.autoscale]

CONFIG = {
    "priority_classes": {"batch": {"value": 10, "preemptible": True, "grace_seconds": 0},
                         "prep": {"value": 50}},
    "pools": {"cpu": {"backend": "fake", "provisioner": "fake", "min_nodes": 0, "max_nodes": 3,
                      "node_template": {"cpus": 2, "memory_mib": 4096}}},
    "queues": {"prep": {"priority_class": "prep", "pools": ["cpu"],
                        "elastic": {"metric": "queue_length", "per_replica": 2, "max": 5, "fleet": {"backend": "fake"}}},
               "batch": {"priority_class": "batch", "pools": ["cpu"]}},
    "scheduler": {"interval_seconds": 0.1, "lease_seconds": 2},
}


class Script:
    """A plan that answers what the test says, and remembers what it was given."""

    def __init__(self):
        self.next: AutoscalePlan = AutoscalePlan()
        self.inputs: list = []

    def __call__(self, inputs, state, config, now):
        self.inputs.append(inputs)
        return self.next


@pytest.fixture
def rt(crossdock_env, tmp_path, monkeypatch):
    cfg = tmp_path / "autoscale.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    monkeypatch.setenv("CROSSDOCK_CONFIG", str(cfg))
    return Runtime.from_env()


@pytest.fixture
def fake(rt):
    backend = FakeBackend(rt.config, rt.store)
    rt.backends.use("fake", backend)
    return backend


@pytest.fixture
def sched(rt, fake):
    sent: list[tuple[str, list, str]] = []
    s = Scheduler(rt, lambda name, args, kind: sent.append((name, args, kind)), holder="leader-t")
    script = Script()
    s.autoscaler.plan_fn = script
    s.sent, s.script = sent, script
    return s


def submit(rt, tmp_path, n, queue="prep", cpus=1):
    return service.submit(rt, [JobSpec(command=["true"], workdir=str(tmp_path), queue=queue, cpus_per_task=cpus)
                               for _ in range(n)])


def autoscale_events(rt):
    return [e for e in rt.store.events() if "job" not in e]


def test_a_pass_scales_the_fleet_adds_nodes_and_records_each_change(rt, fake, sched, tmp_path):
    jobs = submit(rt, tmp_path, 3, cpus=4)  # no node has 4 CPUs: the cycle finds no room for them
    sched.cycle_once()
    assert {rt.store.get(j.id).reason for j in jobs} == {Reason.UNSCHEDULABLE}
    held, = submit(rt, tmp_path, 1, cpus=4)
    rt.store.hold(held.id, True)
    waiting = {j.id: "needs 1 node of pool cpu" for j in [*jobs, held]}
    sched.script.next = AutoscalePlan(
        fleets=(FleetDecision("prep", backlog=3, current=0, recommended=2, desired=2),),
        nodes=(NodeDecision("cpu", current=0, desired=2, add=2, waiting=tuple(waiting)),),
        reasons=waiting, state=AutoscaleState())
    sched.autoscaler.pass_once()

    (given,) = sched.script.inputs
    assert given.fleets == {"prep": 0} and given.groups["cpu"].ready == ()
    assert sorted(j.id for j in given.jobs) == sorted(waiting)
    assert fake.replicas["prep"] == ["prep-1", "prep-2"]
    assert fake.node_group("cpu").ready == ("cpu-1", "cpu-2")
    scaled, added = autoscale_events(rt)
    assert (scaled["event"], scaled["queue"], scaled["from"], scaled["to"]) == ("fleet_scaled", "prep", "0", "2")
    assert scaled["reason"] == "backlog 3: 2 recommended, 2 desired" and scaled["actor"] == "leader-t"
    assert (added["event"], added["pool"], added["nodes"], added["to"]) == ("nodes_added", "cpu", "cpu-1,cpu-2", "2")
    # the jobs the cycle found no room for wait for capacity; a held one keeps its own reason
    assert {rt.store.get(j.id).reason for j in jobs} == {Reason.WAITING_FOR_CAPACITY}
    assert rt.store.get(jobs[0].id).explanation == "needs 1 node of pool cpu"
    assert rt.store.get(held.id).reason == Reason.JOB_HELD_USER
    report = service.autoscaling(rt)
    (fleet,), (pool,) = report["fleets"], report["pools"]
    assert (fleet["queue"], fleet["fleet"], fleet["backend"], fleet["desired"]) == ("prep", "prep", "fake", 2)
    assert (fleet["last_change"]["from"], fleet["last_change"]["to"]) == (0, 2)
    assert (pool["pool"], pool["ready"], pool["desired"], pool["waiting"]) == ("cpu", 0, 2, 4)
    # the cycle that follows keeps the autoscaler's verdict instead of writing Unschedulable back
    sched.cycle_once()
    assert {rt.store.get(j.id).reason for j in jobs} == {Reason.WAITING_FOR_CAPACITY}
    # ... until the autoscaler stops listing them (its pool at max_nodes): the cycle's own reason again
    sched.script.next = AutoscalePlan(state=AutoscaleState())
    sched.autoscaler.pass_once()
    sched.cycle_once()
    assert {rt.store.get(j.id).reason for j in jobs} == {Reason.UNSCHEDULABLE}



def test_scale_in_stops_only_idle_replicas_and_says_how_far_it_got(rt, fake, sched):
    fleet = rt.config.queues["prep"].elastic.fleet.model_copy(update={"name": "prep"})
    fake.scale_fleet(fleet, 4)
    fake.busy = {"prep-3", "prep-4"}
    sched.script.next = AutoscalePlan(fleets=(FleetDecision("prep", backlog=0, current=4, recommended=0, desired=1),),
                                      state=AutoscaleState())
    sched.autoscaler.pass_once()
    assert fake.replicas["prep"] == ["prep-3", "prep-4"]
    (ev,) = autoscale_events(rt)
    assert (ev["from"], ev["to"], ev["desired"]) == ("4", "2", "1")
    assert "2 reached (busy replicas are not stopped)" in ev["reason"]


def test_nodes_are_drained_of_preemptible_work_before_they_go(rt, fake, sched, tmp_path):
    fake.add_nodes("cpu", 2)
    job, = submit(rt, tmp_path, 1, queue="batch")
    sched.cycle_once()
    job = rt.store.get(job.id)
    node = job.nodes[0]
    fake.submit(job)  # what the dispatch task would have done
    sched.reconcile()
    assert rt.store.get(job.id).state is JobState.RUNNING
    other = next(n for n in fake.node_group("cpu").ready if n != node)
    sched.script.next = AutoscalePlan(
        nodes=(NodeDecision("cpu", current=2, desired=0, remove=(node, other), drain=(job.id,), limited_by="Unneeded"),),
        state=AutoscaleState())
    sched.sent.clear()  # the cycle's dispatch
    sched.autoscaler.pass_once()
    # the empty node goes at once; the busy one is drained through the preemption path and stays
    assert fake.removed == [other]
    assert sched.sent == [("crossdock.preempt", [job.id, 0, job.attempts], "fake")]
    assert rt.store.get(job.id).preempt_requested
    drained, removed = autoscale_events(rt)
    assert (drained["event"], drained["nodes"], drained["jobs"]) == ("nodes_drained", node, str(job.id))
    assert (removed["event"], removed["nodes"]) == ("nodes_removed", other)
    # a second pass asks for no second preemption while the job stops
    sched.autoscaler.pass_once()
    assert len(sched.sent) == 1 and fake.removed == [other]
    # the preemption lands (the follower requeues the job): now the node goes
    fake.preempt(rt.store.get(job.id), 0)
    sched.reconcile()
    assert rt.store.get(job.id).state is JobState.PENDING
    sched.autoscaler.pass_once()
    assert fake.removed == [other, node]
    assert [e["event"] for e in autoscale_events(rt)] == ["nodes_drained", "nodes_removed", "nodes_removed"]


def test_the_cycle_takes_the_passes_deletion_candidates_last_and_a_new_leader_too(rt, fake, sched, tmp_path):
    fake.add_nodes("cpu", 2)  # cpu-1 and cpu-2, equal and empty: the cycle's tie goes to cpu-1
    sched.script.next = AutoscalePlan(nodes=(NodeDecision("cpu", current=2, desired=2, candidates=("cpu-1",)),),
                                      state=AutoscaleState(candidates={"cpu-1": 1.0}))
    sched.autoscaler.pass_once()
    first, = submit(rt, tmp_path, 1, queue="batch")
    sched.cycle_once()
    assert rt.store.get(first.id).nodes == ["cpu-2"]
    assert service.autoscaling(rt)["pools"][0]["candidates"] == ["cpu-1"]
    # a leader that starts afresh reads the candidates from the stored state before its first pass
    successor = Scheduler(rt, lambda *a: None, holder="leader-2")
    assert successor.autoscaler.soft_tainted() == {"cpu-1"}
    assert any(n.name == "cpu-1" and DELETION_CANDIDATE in n.taints
               for n in successor.snapshot([], []).nodes)
    # the next pass names none: no node is tainted any more
    sched.script.next = AutoscalePlan(nodes=(NodeDecision("cpu", current=2, desired=2),), state=AutoscaleState())
    sched.autoscaler.pass_once()
    assert sched.autoscaler.soft_tainted() == frozenset()
    assert not any(n.taints for n in sched.snapshot([], []).nodes)


def test_a_backend_that_is_away_skips_its_target_and_the_others_go_on(rt, fake, sched, monkeypatch):
    def away(*_a, **_k):
        raise BackendUnavailable("fleet API unreachable")

    monkeypatch.setattr(fake, "fleet_replicas", away)
    sched.script.next = AutoscalePlan(nodes=(NodeDecision("cpu", current=0, desired=1, add=1),), state=AutoscaleState())
    sched.autoscaler.pass_once()
    assert sched.script.inputs[0].fleets == {}
    assert fake.node_group("cpu").ready == ("cpu-1",)
    report = service.autoscaling(rt)
    assert report["fleets"] == [{"queue": "prep", "fleet": "prep", "backend": "fake",
                                 "error": "BackendUnavailable: fleet API unreachable", "last_change": None}]
    assert report["pools"][0]["last_change"]["to"] == 1


def test_the_leader_runs_the_autoscaler_right_after_new_jobs_arrive(rt, fake, sched, tmp_path, monkeypatch):
    """A spike of pending jobs wakes the loop, and its next turn runs the autoscaler. Every other
    reason for a pass is a day or a minute away here (the autoscaler's and the cycle's intervals,
    reconcile, retention), so only the wake-up can explain a second one; the jobs arrive while the
    loop waits (its first look at the queue after the one it compares with), and the second pass
    ends the loop: nothing depends on how fast the machine is."""
    rt.config.autoscaler.interval_seconds = 86400.0
    rt.config.scheduler.interval_seconds, rt.config.scheduler.lease_seconds = 3600.0, 7200.0
    stop = threading.Event()
    script, looks = sched.script, []
    queue_counts = rt.store.queue_counts

    def look():
        looks.append(len(script.inputs))
        if looks == [1, 1]:  # the loop waits after the first pass, and has its baseline
            submit(rt, tmp_path, 5, cpus=4)
        return queue_counts()

    def plan(inputs, state, config, now):
        if len(script.inputs) == 1:
            stop.set()  # the pass after the spike: the loop ends after this turn
        return script(inputs, state, config, now)

    monkeypatch.setattr(rt.store, "queue_counts", look)
    sched.autoscaler.plan_fn = plan
    watchdog = threading.Timer(120, stop.set)  # only a broken wake-up lets the loop wait this long
    watchdog.start()
    try:
        sched.run(stop, reconcile_every=86400.0)
    finally:
        watchdog.cancel()
    assert looks[:2] == [1, 1], "the jobs did not arrive while the loop waited"
    assert len(script.inputs) == 2, "no autoscaling pass after new jobs arrived"
    assert len(script.inputs[-1].jobs) == 5  # it saw the spike
    assert sched.parts["autoscale"].failures == 0


def test_a_failing_pass_backs_off_on_its_own_and_shows_in_health(rt, fake, sched, tmp_path):
    """The autoscaler is one part of the leader's turn: when it fails, it backs off while the
    cycle goes on scheduling, and ``crossdock health`` names it."""
    from crossdock.workers.health import _scheduler_part

    fake.add_nodes("cpu", 1)

    def broken(*_a):
        raise BackendUnavailable("the plan's backend is away")

    sched.autoscaler.plan_fn = broken
    stop = threading.Event()
    t = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    t.start()
    try:
        job, = submit(rt, tmp_path, 1)
        deadline = time.monotonic() + 10
        while (rt.store.get(job.id).state is JobState.PENDING or not sched.parts["autoscale"].failures) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rt.store.get(job.id).state is JobState.SCHEDULED  # the cycle went on
        report = sched.report()
        assert report["parts"]["autoscale"]["state"] == "backing-off"
        assert report["parts"]["cycle"]["state"] == "running"
        part = _scheduler_part({**report, "thread_alive": True, "restarts": 0})
        assert not part["ok"]
        assert "autoscale backing-off (BackendUnavailable: the plan's backend is away" in part["detail"]
    finally:
        stop.set()
        t.join(5)


def test_crossdock_autoscale_shows_each_fleet_and_pool_with_its_last_change(rt, fake, sched):
    import os
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "crossdock", "autoscale", *args], env=dict(os.environ),
                              capture_output=True, text=True, timeout=60)

    out = cli()
    assert out.returncode == 0 and "no autoscaling pass yet" in out.stdout, out.stderr
    sched.script.next = AutoscalePlan(
        fleets=(FleetDecision("prep", backlog=9, current=0, recommended=5, desired=4, limited_by="ScaleUpLimit"),),
        nodes=(NodeDecision("cpu", current=0, desired=3, add=3, waiting=(1, 2), limited_by="MaxNodes"),),
        state=AutoscaleState())
    sched.autoscaler.pass_once()
    out = cli()
    assert out.returncode == 0, out.stderr
    fleet_row = next(line.split() for line in out.stdout.splitlines() if line.split()[:1] == ["prep"])
    pool_row = next(line.split() for line in out.stdout.splitlines() if line.split()[:1] == ["cpu"])
    assert fleet_row[:7] == ["prep", "fake/prep", "9", "0", "5", "4", "ScaleUpLimit"] and fleet_row[7] == "0→4"
    # the pool as the pass found it (no node yet), what it decided (no node taken last), and what it did
    assert pool_row[:7] == ["cpu", "0", "0", "3", "2", "0", "MaxNodes"] and pool_row[7] == "0→3"
    data = json.loads(cli("--json").stdout)
    assert data["fleets"][0]["last_change"]["event"] == "fleet_scaled"
    assert data["pools"][0]["last_change"]["nodes"] == ["cpu-1", "cpu-2", "cpu-3"]


def test_a_pool_grows_for_its_backlog_runs_it_and_shrinks_back(rt, fake, tmp_path, monkeypatch):
    """The real plan in the live loop, closed by the fake backend: pending jobs that fit no node get
    nodes of the pool's template, run there, and the nodes go once unneeded (times shortened)."""
    from crossdock.backends.fake.backend import RUN_SECONDS_ENV
    from crossdock.workers import tasks as worker_tasks

    rt.config.autoscaler.scale_down_unneeded_seconds = 0.5
    rt.config.autoscaler.scale_down_delay_after_add_seconds = 0
    worker_tasks.runtime.cache_clear()
    monkeypatch.setattr(worker_tasks, "runtime", lambda: rt)  # the dispatch task uses this runtime and fake

    def send(name, args, kind):
        if name == "crossdock.dispatch_batch":
            worker_tasks.dispatch_batch.apply(args=args).get()
        elif name == "crossdock.dispatch":
            worker_tasks.dispatch.apply(args=args).get()

    sched = Scheduler(rt, send, holder="leader-pool")
    jobs = service.submit(rt, [JobSpec(command=["true"], workdir=str(tmp_path), queue="batch", cpus_per_task=1,
                                       env={RUN_SECONDS_ENV: "0.3"}) for _ in range(5)])
    stop = threading.Event()
    t = threading.Thread(target=sched.run, args=(stop, 0.2), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(j.state is JobState.COMPLETED for j in rt.store.get_many(
                [j.id for j in jobs])):
            time.sleep(0.05)
        assert {j.state for j in rt.store.get_many([j.id for j in jobs])} == {JobState.COMPLETED}
        added = [e for e in autoscale_events(rt) if e["event"] == "nodes_added"]
        assert sum(len(e["nodes"].split(",")) for e in added) == 3  # 5 one-CPU jobs on 2-CPU nodes, max 3
        while time.monotonic() < deadline and fake.node_group("cpu").ready:
            time.sleep(0.05)
        assert fake.node_group("cpu").ready == ()
        assert sorted(fake.removed) == ["cpu-1", "cpu-2", "cpu-3"]
    finally:
        stop.set()
        t.join(5)
