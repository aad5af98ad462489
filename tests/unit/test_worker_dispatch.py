"""The dispatch side of a cycle: which admitted jobs one dispatch task submits together
(``dispatch_groups``), and which waiting jobs the cycle's last phase hands to a pool's backend
queue (``admit_to_backend_queues``)."""

from datetime import datetime, timezone

import pytest

from crossdock.queue.config import parse_config
from crossdock.queue.cycle import Placement, run_cycle
from crossdock.queue.errors import ConfigError
from crossdock.queue.models import ArraySpec, Job, JobSpec
from crossdock.queue.snapshot import Node, Snapshot
from crossdock.queue.states import JobState, Reason
from crossdock.queue.assembly import Records, build_snapshot
from crossdock.queue.dispatch import DispatchGroup, dispatch_groups
from crossdock.queue.ports import Capabilities

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def config(backend_queue: int = 0, quota: dict | None = None):
    return parse_config({
        "priority_classes": {"b": {"value": 100}},
        "pools": {"hpc": {"backend": "slurm", "partition": "cpu", "backend_queue": backend_queue},
                  "small": {"backend": "slurm", "partition": "small"},
                  "box": {"backend": "local"}},
        "queues": {"q": {"priority_class": "b", "pools": ["hpc"]},
                   "quoted": {"priority_class": "b", "pools": ["hpc"], "quota": quota or {"cpu": 100}}},
        "scheduler": {"default_mem_per_cpu_mib": 0},
    })


NODES = (Node("cpu1", "hpc", "slurm", 2000, 1000), Node("cpu2", "hpc", "slurm", 2000, 1000))


def array(first_id: int, n: int, max_running: int | None = None, queue: str = "q", **spec) -> list[Job]:
    arr = ArraySpec(task_ids=list(range(n)), max_running=max_running)
    return [Job(id=first_id + t, spec=JobSpec(command=["true"], array=arr, **spec), queue=queue, pools=["hpc"],
                array_job_id=first_id, array_task_id=t) for t in range(n)]


CAPABILITIES = {"slurm": Capabilities(arrays=True, batches=True, reowns_claims=True, backend_queue=True),
                "local": Capabilities(heartbeat=True)}


def dispatch_groups_of(placements, jobs, running_per_array):
    return dispatch_groups(placements, jobs, running_per_array, CAPABILITIES.__getitem__)


def cycle(pending: list[Job], cfg, active: tuple[Job, ...] = (), running_per_array=None):
    """One cycle; returns its result and the placements its backend-queue phase added (no nodes)."""
    snap = build_snapshot(Records(pending, active, NODES), cfg)
    if running_per_array:
        snap = Snapshot(nodes=snap.nodes, allocations=snap.allocations, running_per_array=running_per_array,
                        backend_queued=snap.backend_queued)
    result = run_cycle(snap, pending, cfg, NOW)
    return result, [p for p in result.admitted if not p.nodes]


# --- grouping -------------------------------------------------------------------------------------


def test_tasks_of_one_array_in_one_slurm_pool_are_one_group_and_local_jobs_go_alone():
    tasks = array(10, 3)
    lone = Job(id=20, spec=JobSpec(command=["true"]), attempts=0)
    local = array(30, 2)
    jobs = {j.id: j for j in [*tasks, lone, *local]}
    placements = [Placement(t.id, "hpc", "slurm", ("cpu1",)) for t in reversed(tasks)]
    placements += [Placement(20, "hpc", "slurm", ("cpu2",))]
    placements += [Placement(t.id, "box", "local", ("localhost",)) for t in local]
    groups = dispatch_groups_of(placements, jobs, {})
    assert DispatchGroup("slurm", 1, (10, 11, 12), 10, None) in groups
    assert sorted(g.job_ids for g in groups if g.array_job_id is None) == [(20,), (30,), (31,)]
    assert len(groups) == 4


@pytest.mark.parametrize("running, throttle", [(0, 4), (1, 3), (3, 1)], ids=["free", "one-running", "one-slot"])
def test_group_throttle_is_the_array_free_slots_at_the_start_of_the_cycle(running, throttle):
    tasks = array(10, 6, max_running=4)
    groups = dispatch_groups_of([Placement(t.id, "hpc", "slurm", ()) for t in tasks], {t.id: t for t in tasks},
                             {10: running})
    assert [(g.job_ids, g.throttle) for g in groups] == [(tuple(range(10, 16)), throttle)]


def test_separate_jobs_of_one_pool_are_batched_in_chunks():
    lone = {i: Job(id=i, spec=JobSpec(command=["true"]), attempts=i % 2) for i in range(1, 141)}
    groups = dispatch_groups_of([Placement(i, "hpc", "slurm", ("cpu1",)) for i in lone], lone, {})
    assert [len(g.job_ids) for g in groups] == [64, 64, 12] and all(g.batch for g in groups)
    assert [a for g in groups for a in g.attempts] == [i % 2 + 1 for i in range(1, 141)]
    other = dispatch_groups_of([Placement(1, "hpc", "slurm", ()), Placement(2, "small", "slurm", ())], lone, {})
    assert sorted((g.job_ids, g.batch) for g in other) == [((1,), False), ((2,), False)]


def test_pools_and_attempts_split_groups_and_a_group_of_one_is_a_single_dispatch():
    tasks = array(10, 4)
    tasks[3] = tasks[3].model_copy(update={"attempts": 1})  # a requeued task: its next attempt is 2
    placements = [Placement(10, "hpc", "slurm", ()), Placement(11, "hpc", "slurm", ()),
                  Placement(12, "small", "slurm", ()), Placement(13, "hpc", "slurm", ())]
    groups = {(g.job_ids, g.attempt, g.array_job_id) for g in dispatch_groups_of(placements, {t.id: t for t in tasks}, {})}
    assert groups == {((10, 11), 1, 10), ((12,), 1, None), ((13,), 2, None)}


# --- backend queues -------------------------------------------------------------------------------


def test_without_a_backend_queue_only_what_fits_is_admitted():
    result, added = cycle(array(1, 10), config(backend_queue=0))
    assert (len(result.admitted), added) == (4, [])
    assert set(result.pending.values()) == {Reason.RESOURCES}


def test_backend_queue_takes_what_does_not_fit_up_to_its_size_without_nodes():
    result, added = cycle(array(1, 10), config(backend_queue=5))
    assert len(result.admitted) == 9 and len(added) == 5
    assert all(p.nodes == () and p.pool == "hpc" and p.backend == "slurm" and p.cpu_milli == 1000 for p in added)
    assert [j for j in range(1, 11) if j in result.pending] == [10]
    groups = dispatch_groups_of(result.admitted, {t.id: t for t in array(1, 10)}, {})
    assert [g.job_ids for g in groups] == [tuple(range(1, 10))]


def test_jobs_already_waiting_in_the_backend_use_up_its_queue():
    waiting = tuple(Job(id=100 + i, spec=JobSpec(command=["true"]), queue="q", pools=["hpc"], pool="hpc",
                        state=JobState.SCHEDULED, backend="slurm") for i in range(4))
    _, added = cycle(array(1, 10), config(backend_queue=5), active=waiting)
    assert len(added) == 1


def test_a_job_no_node_of_the_pool_could_ever_run_stays_pending():
    too_big = Job(id=1, spec=JobSpec(command=["true"], cpus_per_task=8), queue="q", pools=["hpc"])
    result, added = cycle([too_big], config(backend_queue=50))
    assert added == [] and result.pending[1] == Reason.UNSCHEDULABLE


def test_jobs_of_a_queue_with_a_quota_never_go_to_a_backend_queue():
    result, added = cycle(array(1, 10, queue="quoted"), config(backend_queue=50))
    assert len(result.admitted) == 4 and added == []


def test_a_throttled_array_goes_whole_with_its_free_slots_as_throttle():
    tasks = array(1, 10, max_running=3)
    result, added = cycle(tasks, config(backend_queue=50))
    assert len(result.admitted) == 10
    groups = dispatch_groups_of(result.admitted, {t.id: t for t in tasks}, {})
    assert [(len(g.job_ids), g.throttle) for g in groups] == [(10, 3)]


def test_a_throttled_array_with_no_free_slot_gets_nothing_more():
    tasks = array(1, 10, max_running=3)
    result, added = cycle(tasks[3:], config(backend_queue=50), running_per_array={1: 3})
    assert result.admitted == [] and added == []
    assert set(result.pending.values()) == {Reason.ARRAY_TASK_LIMIT}


@pytest.mark.parametrize("pool, message", [
    ({"backend": "local", "backend_queue": 3}, "pools.p: backend_queue: 3 needs a backend with a queue of its own"),
    ({"backend": "slurm", "partition": "cpu", "backend_queue": -1}, "pools.p.backend_queue: must be ≥ 0"),
    ({"backend": "pbs"}, "pools.p.backend: 'pbs' is not a backend; known: slurm, local"),
], ids=["local", "negative", "unknown"])
def test_backend_queue_is_validated(pool, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"priority_classes": {"b": {"value": 1}}, "pools": {"p": pool},
                      "queues": {"q": {"priority_class": "b", "pools": ["p"]}}}, backends=CAPABILITIES)
