"""The Slurm backend's power_save provisioner, its start estimates and its view of powered-down
nodes, over a scripted driver (the real cluster: tests/integration/slurm/test_slurm_power.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from crossdock.backends.slurm import SlurmBackend
from crossdock.backends.slurm.driver import SlurmJob, SlurmNode, SlurmPartition, WillRun
from crossdock.backends.slurm.power import group, power_state
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.ports import EstimatesStart, ProvisionsNodes
from crossdock.queue.states import JobState


def node(name: str, state: str = "idle", *flags: str, partition: str = "elastic") -> SlurmNode:
    return SlurmNode(name, state, tuple(f.lower() for f in flags), (partition,), 4, 0, 8000, 0, {}, {})


class Driver:
    """Answers from fixed records; records every node update and will-run test."""

    name = "scripted"

    def __init__(self, nodes: list[SlurmNode], jobs: list[SlurmJob] = ()):
        self._nodes, self._jobs = nodes, list(jobs)
        self.updates: list[tuple[tuple[str, ...], str]] = []
        self.will_runs: list[str] = []
        self.cancelled: list[str] = []
        self.start = "2026-01-01T00:05:00"

    def nodes(self):
        return self._nodes

    def partitions(self):
        parts = sorted({p for n in self._nodes for p in n.partitions})
        return [SlurmPartition(p, tuple(n.name for n in self._nodes if p in n.partitions)) for p in parts]

    def jobs(self):
        return self._jobs

    def update_nodes(self, names, state):
        self.updates.append((tuple(names), state))

    def launch_timeout_s(self):
        return 20.0

    def batch_launched(self, job_id):
        return True

    def will_run(self, request):
        self.will_runs.append(request.partition)
        return WillRun(self.start, ("elastic1",), request.partition)

    def cancel(self, ref):
        self.cancelled.append(ref)


def config(provisioner: str | None = "power_save", enabled: bool = True):
    pool = {"backend": "slurm", "partition": "elastic"}
    if provisioner:
        pool["provisioner"] = provisioner
    return parse_config({"priority_classes": {"b": {"value": 1}}, "pools": {"el": pool, "cpu": {"backend": "slurm", "partition": "cpu"}},
                         "queues": {"q": {"priority_class": "b", "pools": ["el"]}},
                         "autoscaler": {"enabled": enabled}})


@pytest.mark.parametrize("state, flags, expected", [
    ("idle", (), "on"),
    ("mixed", (), "on"),
    ("idle", ("CLOUD", "POWERED_DOWN"), "powered_down"),
    ("idle", ("CLOUD", "POWER_UP", "POWERED_DOWN"), "powering_up"),
    ("mixed", ("CLOUD", "NOT_RESPONDING", "POWERING_UP"), "powering_up"),
    ("idle", ("CLOUD", "DRAIN", "POWER_DOWN"), "powering_down"),
    ("idle", ("CLOUD", "POWERING_DOWN"), "powering_down"),
    ("down", ("CLOUD", "POWERED_DOWN", "NOT_RESPONDING"), "failed"),
], ids=lambda v: v if isinstance(v, str) else "+".join(v) or "-")
def test_power_state_from_slurm_s_state_flags(state, flags, expected):
    """The flags as sinfo --json reports them on 22.05 (seen on the local cluster)."""
    assert power_state(node("n", state, *flags)) == expected


def test_a_node_group_counts_powered_down_nodes_as_spare_and_leaves_out_drained_and_failed_ones():
    g = group("el", [node("e1"), node("e2", "idle", "POWERED_DOWN"), node("e3", "idle", "POWERING_UP"),
                     node("e4", "idle", "POWERING_DOWN"), node("e5", "idle", "DRAIN"),
                     node("e6", "down", "POWERED_DOWN"), node("e7", "idle", "POWERED_DOWN")])
    assert (g.ready, g.starting, g.stopping, g.spare) == (("e1",), ("e3",), ("e4",), 2)


def test_add_nodes_powers_up_spare_nodes_once_and_remove_nodes_powers_down_those_on():
    driver = Driver([node("e1"), node("e2", "idle", "POWERED_DOWN"), node("e3", "idle", "POWERED_DOWN"),
                     node("e4", "idle", "POWERING_UP"), node("c1", partition="cpu")])
    backend = SlurmBackend(driver, config=config())
    assert isinstance(backend, ProvisionsNodes) and "power_save" in backend.capabilities.provisioners
    assert backend.add_nodes("el", 5) == ["e2", "e3"]  # e4 already comes up; c1 is another pool's
    assert backend.remove_nodes("el", ["e1", "e2", "e4", "c1", "e1"]) == ["e1", "e4"]
    assert driver.updates == [(("e2", "e3"), "power_up"), (("e1", "e4"), "power_down_asap")]
    assert backend.add_nodes("el", 0) == [] and len(driver.updates) == 2
    with pytest.raises(KeyError, match="not a Slurm pool"):
        backend.node_group("nope")


@pytest.mark.parametrize("provisioner, enabled, schedulable", [
    ("power_save", True, False), (None, True, True), ("power_save", False, True),
], ids=["crossdock-powers-up", "slurm-powers-up-on-allocation", "autoscaler-off"])
def test_powered_down_nodes_stay_in_the_inventory_schedulable_only_where_slurm_powers_them_up(
        provisioner, enabled, schedulable):
    driver = Driver([node("e1", "idle", "CLOUD", "POWERED_DOWN"), node("e2", "idle", "CLOUD", "POWERING_UP"),
                     node("e3", "idle", "CLOUD")])
    inv = {n.name: n for n in SlurmBackend(driver, config=config(provisioner, enabled)).inventory().nodes}
    assert {n: (v.schedulable, v.labels["slurm.power"]) for n, v in inv.items()} == {
        "e1": (schedulable, "powered_down"), "e2": (False, "powering_up"), "e3": (True, "on")}


def job(job_id: int = 1, cpus: int = 1, **extra) -> Job:
    return Job(id=job_id, spec=JobSpec(command=["true"], cpus_per_task=cpus, workdir="/tmp"), queue="q", **extra)


def test_start_estimates_are_slurm_s_will_run_answer_cached_per_shape_and_bounded():
    driver = Driver([node("elastic1")])
    clock = [100.0]
    backend = SlurmBackend(driver, config=config(), clock=lambda: clock[0])
    backend._wall = lambda: datetime.fromisoformat("2026-01-01T00:00:00").timestamp()
    backend.estimate_budget = 2
    assert isinstance(backend, EstimatesStart) and backend.capabilities.estimates_start
    assert backend.estimate_start(job(1), "el") == 300.0
    assert backend.estimate_start(job(2), "el") == 300.0  # same shape: cached
    assert backend.estimate_start(job(3, cpus=2), "el") == 300.0
    assert backend.estimate_start(job(4, cpus=3), "el") is None  # budget of 2 tests spent
    assert driver.will_runs == ["elastic", "elastic"]
    clock[0] += backend.estimate_ttl_s
    assert backend.estimate_start(job(4, cpus=3), "el") == 300.0  # a new window
    assert backend.estimate_start(job(1), "not-a-pool") is None


def test_a_start_only_powered_down_nodes_could_give_is_their_resume_time():
    driver = Driver([node("elastic1", "idle", "CLOUD", "POWERED_DOWN")])
    backend = SlurmBackend(driver, config=config())
    backend._wall = lambda: datetime.fromisoformat("2026-01-01T00:00:00").timestamp()
    backend.inventory()  # learns the power states
    driver.start = "2707-06-06T20:11:42"  # what 22.05 answers then
    assert backend.estimate_start(job(1), "el") == backend.resume_s
    driver.start, backend._estimates = "2026-01-01T00:00:10", {}
    assert backend.estimate_start(job(1), "el") == 10 + backend.resume_s


def slurm_job(job_id: int, crossdock_id: int, state: str = "PENDING", restarts: int = 1, reason: str = "BeginTime"):
    return SlurmJob(job_id, state, reason, 0, None, comment=f"crossdock:{crossdock_id}:1", restarts=restarts)


def test_an_attempt_slurm_requeued_onto_a_node_that_failed_to_resume_is_cancelled_and_node_fail():
    failed = node("elastic3", "down", "CLOUD", "POWERED_DOWN", "NOT_RESPONDING")
    driver = Driver([failed, node("elastic1")],
                    [slurm_job(50, 1), slurm_job(51, 2), slurm_job(52, 3, restarts=0, reason="Priority"),
                     slurm_job(53, 4, "RUNNING", 0, reason="None"),
                     slurm_job(54, 5, restarts=0, reason="ReqNodeNotAvail,_UnavailableNodes:elastic3")])
    backend = SlurmBackend(driver, config=config())
    jobs = [job(1, nodes=["elastic3"], attempts=1, backend_ref="50"),  # stranded
            job(2, nodes=["elastic1"], attempts=1, backend_ref="51"),  # requeued, its node is fine
            job(3, nodes=["elastic3"], attempts=1, backend_ref="52"),  # never started: Slurm resumes it
            job(4, nodes=["elastic1"], attempts=1, backend_ref="53"),
            job(5, nodes=["elastic3"], attempts=1, backend_ref="54")]  # placed from a stale inventory
    got = backend.status(jobs)
    assert {i: (s.state, s.reason) for i, s in got.items()} == {
        1: (JobState.NODE_FAIL, "ResumeFailed"), 2: (JobState.PENDING, "BeginTime"),
        3: (JobState.PENDING, "Priority"), 4: (JobState.RUNNING, "None"), 5: (JobState.NODE_FAIL, "ResumeFailed")}
    assert driver.cancelled == ["50", "54"]
