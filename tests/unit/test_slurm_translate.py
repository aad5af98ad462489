"""Slurm translation without a cluster: state table, exit statuses, array/host strings,
v0.0.38 record parsing, sbatch option rendering, and the backend's dispatch logic over an
in-memory driver."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossdock.backends.slurm.backend import SlurmBackend
from crossdock.backends.slurm.cli import export_value, parse_sacct, sbatch_options
from crossdock.backends.slurm.driver import SlurmJob, SlurmUnavailable, SubmitRejected, parse_gpu_gres, parse_job, parse_node
from crossdock.backends.slurm.request import build_request, job_tag, parse_tag, render_script
from crossdock.backends.slurm.rest import job_properties
from crossdock.backends.slurm.states import (
    SLURM_STATES,
    UnknownSlurmState,
    decode_wait_status,
    expand_array_tasks,
    format_array_tasks,
    node_names,
    parse_exit_code,
    translate,
)
from crossdock.queue.hostlist import HostlistError
from crossdock.queue.models import ArraySpec, Dependency, DependencySpec, GpuRequest, Gres, Job, JobSpec
from crossdock.queue.states import JobState, Reason

# --- state table ---------------------------------------------------------------------------

EVERY_SLURM_STATE = [
    "PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED",
    "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED", "RESIZING",
    "REVOKED", "SPECIAL_EXIT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED", "SIGNALING",
    "STAGE_OUT", "LAUNCH_FAILED", "POWER_UP_NODE", "RECONFIG_FAIL", "UPDATE_DB",
]


@pytest.mark.parametrize("slurm_state", EVERY_SLURM_STATE)
def test_every_slurm_state_is_in_the_table(slurm_state):
    assert slurm_state in SLURM_STATES
    assert isinstance(translate(slurm_state).state, JobState)


@pytest.mark.parametrize(
    "slurm_state, reason, state, want_reason",
    [
        ("PENDING", "Priority", JobState.PENDING, Reason.PRIORITY),
        ("PENDING", "Resources", JobState.PENDING, Reason.RESOURCES),
        ("PENDING", "JobArrayTaskLimit", JobState.PENDING, Reason.ARRAY_TASK_LIMIT),
        ("PENDING", "DependencyNeverSatisfied", JobState.PENDING, Reason.DEPENDENCY_NEVER_SATISFIED),
        ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:cpu1", JobState.PENDING, "ReqNodeNotAvail,_UnavailableNodes:cpu1"),
        ("CONFIGURING", "None", JobState.SCHEDULED, "Configuring"),
        ("RUNNING", "None", JobState.RUNNING, Reason.NONE),
        ("SUSPENDED", "None", JobState.RUNNING, "Suspended"),
        ("COMPLETING", "None", JobState.RUNNING, "Completing"),
        ("COMPLETED", "None", JobState.COMPLETED, Reason.NONE),
        ("FAILED", "NonZeroExitCode", JobState.FAILED, Reason.NON_ZERO_EXIT),
        ("FAILED", "JobLaunchFailure", JobState.FAILED, "JobLaunchFailure"),
        ("CANCELLED", "None", JobState.CANCELLED, Reason.CANCELLED_BY_USER),
        ("TIMEOUT", "TimeLimit", JobState.TIMEOUT, Reason.TIME_LIMIT),
        ("DEADLINE", "None", JobState.TIMEOUT, "Deadline"),
        ("NODE_FAIL", "None", JobState.NODE_FAIL, Reason.NODE_LOST),
        ("BOOT_FAIL", "None", JobState.NODE_FAIL, "BootFail"),
        ("PREEMPTED", "None", JobState.PREEMPTED, Reason.PREEMPTED),
        ("OUT_OF_MEMORY", "None", JobState.OUT_OF_MEMORY, "OutOfMemory"),
        ("REQUEUED", "None", JobState.PENDING, "Requeued"),
        ("SPECIAL_EXIT", "None", JobState.PENDING, Reason.JOB_HELD_ADMIN),
        ("REVOKED", "None", JobState.CANCELLED, "Revoked"),
        ("RESIZING", "None", JobState.RUNNING, "Resizing"),
    ],
)
def test_translate(slurm_state, reason, state, want_reason):
    got = translate(slurm_state, reason)
    assert (got.state, got.reason) == (state, str(want_reason))


@pytest.mark.parametrize("text", ["CANCELLED by 0", "cancelled", "CANCELLED+", "CANCELLED,COMPLETING"])
def test_translate_ignores_flags_and_case(text):
    assert translate(text).state == JobState.CANCELLED


def test_unknown_state_names_the_table():
    with pytest.raises(UnknownSlurmState, match="SLURM_STATES"):
        translate("EXPLODED")


def test_active_slurm_states_hold_resources_and_final_ones_are_terminal():
    for name in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
        assert translate(name).state.active
    for name in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"):
        assert translate(name).state.terminal


# --- exit statuses -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [(0, (0, None)), (768, (3, None)), (1792, (7, None)), (256, (1, None)), (65280, (255, None)),
     (15, (0, 15)), (9, (0, 9)), (137, (0, 9)), (4294967294, (0, None))],
    ids=["ok", "exit3", "exit7", "exit1", "exit255", "sigterm", "sigkill", "sigkill+core", "no_val"],
)
def test_decode_wait_status(raw, expected):
    assert decode_wait_status(raw) == expected


@given(st.integers(0, 255), st.integers(0, 127))
def test_wait_status_roundtrip(code, sig):
    raw = sig if sig else code << 8
    assert decode_wait_status(raw) == ((0, sig) if sig else (code, None))


@pytest.mark.parametrize("text, expected", [("3:0", (3, None)), ("0:15", (0, 15)), ("7:0", (7, None)), ("0:0", (0, None))])
def test_parse_exit_code(text, expected):
    assert parse_exit_code(text) == expected


def test_negative_wait_status_is_rejected():
    with pytest.raises(ValueError):
        decode_wait_status(-1)


# --- array and host strings ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, ids",
    [("2-5%2", [2, 3, 4, 5]), ("1,3,5-7", [1, 3, 5, 6, 7]), ("0-10:5", [0, 5, 10]), ("4", [4]), ("", [])],
)
def test_expand_array_tasks(text, ids):
    assert expand_array_tasks(text) == ids


@given(st.lists(st.integers(0, 300), min_size=1, max_size=40), st.one_of(st.none(), st.integers(1, 9)))
def test_array_format_roundtrip(ids, throttle):
    text = format_array_tasks(ids, throttle)
    assert expand_array_tasks(text) == sorted(set(ids))
    assert text.endswith(f"%{throttle}") == (throttle is not None)


@pytest.mark.parametrize(
    "text, hosts",
    [pytest.param("cpu[1-2],gpu-a100-1", ["cpu1", "cpu2", "gpu-a100-1"], id="list"),
     pytest.param("n[01-03,7]", ["n01", "n02", "n03", "n7"], id="padded-and-single"),
     pytest.param("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"], id="two-groups"),
     pytest.param("gpu-l4-1", ["gpu-l4-1"], id="plain"),
     pytest.param("", [], id="empty"), pytest.param(None, [], id="absent"),
     pytest.param("(null)", [], id="null"), pytest.param("None assigned", [], id="pending")],
)
def test_node_names(text, hosts):
    assert node_names(text) == hosts


def test_node_names_refuse_a_broken_list():
    with pytest.raises(HostlistError, match="never closed"):
        node_names("cpu[1-2")


@pytest.mark.parametrize(
    "text, gpus",
    [("gpu:a100:8(S:0)", {"a100": 8}), ("gpu:a100:2(IDX:0-1)", {"a100": 2}), ("gpu:0", {}),
     ("gpu:l4:0(IDX:N/A)", {}), ("gpu:3", {"": 3}), ("", {}), ("gpu:a100:2(IDX:0,3),gpu:l4:1", {"a100": 2, "l4": 1})],
)
def test_parse_gpu_gres(text, gpus):
    assert parse_gpu_gres(text) == gpus


# --- v0.0.38 records -----------------------------------------------------------------------


def test_parse_job_decodes_raw_exit_and_gres():
    j = parse_job({"job_id": 5, "array_job_id": 4, "array_task_id": 0, "job_state": "FAILED", "exit_code": 768,
                   "state_reason": "NonZeroExitCode", "comment": "crossdock:7:0", "nodes": "gpu-a100-1",
                   "gres_detail": ["gpu:a100:2(IDX:0-1)"], "cpus": 1, "restart_cnt": 1})
    assert (j.ref, j.exit_code, j.signal, j.gpus, j.restarts, j.nodes) == ("4_0", 3, None, {"a100": 2}, 1, ("gpu-a100-1",))


def test_parse_job_expands_the_pending_rest_of_an_array():
    j = parse_job({"job_id": 4, "array_job_id": 4, "array_task_id": None, "array_task_string": "2-5%2",
                   "job_state": "PENDING", "exit_code": 0, "state_reason": "JobArrayTaskLimit"})
    assert j.array_task_id is None and j.array_pending_tasks == (2, 3, 4, 5)


def test_parse_job_plain_job_has_no_array():
    j = parse_job({"job_id": 9, "array_job_id": 0, "array_task_id": None, "job_state": "TIMEOUT", "exit_code": 15})
    assert (j.ref, j.array_job_id, j.exit_code, j.signal) == ("9", None, 0, 15)


def test_parse_node():
    n = parse_node({"name": "gpu-a100-1", "state": "mixed", "state_flags": ["DRAIN"], "cpus": 16, "alloc_cpus": 2,
                    "real_memory": 64000, "alloc_memory": 200, "gres": "gpu:a100:8", "gres_used": "gpu:a100:4(IDX:0-3)",
                    "partitions": ["gpu-a100", "high"]})
    assert (n.gpus, n.gpus_alloc, n.flags, n.partitions) == ({"a100": 8}, {"a100": 4}, ("drain",), ("gpu-a100", "high"))


def test_parse_sacct_text():
    jobs = parse_sacct("12|wrap|FAILED|7:0|None|cpu|cpu1|root\n13_2|arr|CANCELLED by 0|0:15|None|cpu|None assigned|root\n")
    assert [(j.ref, j.state, j.exit_code, j.signal, j.nodes) for j in jobs] == [
        ("12", "FAILED", 7, None, ("cpu1",)), ("13_2", "CANCELLED", 0, 15, ())]


# --- submission rendering ------------------------------------------------------------------


def _job(job_id=42, attempt=1, **spec) -> Job:
    spec.setdefault("command", ["echo", "hi there"])
    spec.setdefault("workdir", "/tmp")
    return Job(id=job_id, spec=JobSpec(**spec), attempts=attempt)


def test_tag_roundtrip_and_foreign_comments():
    assert parse_tag(job_tag(42, 3)) == (42, 3)
    assert parse_tag("my own comment") is None and parse_tag("crossdock:x:1") is None


def test_sbatch_options_carry_every_resource():
    job = _job(cpus_per_task=4, mem_per_node_mib=2048, time_limit_seconds=30 * 60, gres=[Gres(name="gpu", type="a100", count=2)],
               array=ArraySpec(task_ids=[0, 1, 2, 3, 7], max_running=2), stdout="/tmp/%A_%a.out", name="train")
    opts = sbatch_options(build_request(job, partition="gpu-a100", nodelist=["gpu-a100-1"]))
    for expected in ["--job-name=train", "--comment=crossdock:42:1", "--chdir=/tmp", "--partition=gpu-a100",
                     "--nodelist=gpu-a100-1", "--cpus-per-task=4", "--mem=2048M", "--time=30", "--gres=gpu:a100:2",
                     "--array=0-3,7%2", "--output=/tmp/%A_%a.out", "--requeue", "--export=ALL"]:
        assert expected in opts
    assert not any(o.startswith("--gpus=") for o in opts)


@pytest.mark.parametrize(
    "seconds, minutes",
    [pytest.param(90, 2, id="90s-rounds-up"), pytest.param(60, 1, id="one-minute"),
     pytest.param(1, 1, id="one-second"), pytest.param(3601, 61, id="just-past-an-hour"),
     pytest.param(None, None, id="no-limit")],
)
def test_time_limit_in_seconds_becomes_slurm_minutes_rounded_up(seconds, minutes):
    """A Python-API limit in seconds reaches Slurm as whole minutes, never less than asked."""
    req = build_request(_job(time_limit_seconds=seconds))
    assert req.time_limit_minutes == minutes
    opts = [o for o in sbatch_options(req) if o.startswith("--time")]
    assert opts == ([] if minutes is None else [f"--time={minutes}"])
    assert job_properties(req, {}).get("time_limit") == minutes


@pytest.mark.parametrize(
    "gpus, gres, per_job, per_task",
    [(GpuRequest(count=2, type="l4"), ("gpu:l4:2",), None, None),
     (GpuRequest(count=3, per="job"), (), "3", None),
     (GpuRequest(count=1, type="a100", per="task"), (), None, "a100:1"),
     (GpuRequest(count=2, models=["a100", "l4"]), ("gpu:2",), None, None)],
    ids=["typed-per-node", "per-job", "per-task", "any-of-models"],
)
def test_gpu_requests(gpus, gres, per_job, per_task):
    req = build_request(_job(gpus=gpus))
    assert (req.gres, req.gpus, req.gpus_per_task) == (gres, per_job, per_task)


def test_fractional_gpu_is_rejected_with_the_fix():
    with pytest.raises(SubmitRejected, match="whole GPUs"):
        build_request(_job(gpus=GpuRequest(count=1, share=0.5)))


def test_dependencies_are_translated_to_slurm_ids():
    dep = DependencySpec(combine="OR", deps=[Dependency(type="afterok", job_id=1), Dependency(type="afterany", job_id=2, array_task=3)])
    req = build_request(_job(dependency=dep), slurm_ids={1: "101", 2: "102"})
    assert req.dependency == "afterok:101?afterany:102_3"
    assert build_request(_job(dependency=dep)).dependency is None  # left to crossdock's scheduler
    with pytest.raises(SubmitRejected, match="crossdock job 2"):
        build_request(_job(dependency=dep), slurm_ids={1: "101"})


def test_script_rendering():
    assert render_script(JobSpec(command=["echo", "a b"])) == "#!/bin/bash\nexec echo 'a b'\n"
    assert render_script(JobSpec(script="echo x\n")) == "#!/bin/bash\necho x\n"
    assert render_script(JobSpec(script="#!/usr/bin/env python3\nprint(1)\n")).startswith("#!/usr/bin/env python3")


def test_export_keeps_values_with_commas_out_of_the_option():
    assert export_value("ALL", {"A": "1,2"}) == "ALL"
    assert export_value("NONE", {"B": "x", "A": "1,2"}) == "A,B"
    assert export_value("NONE", {}) == "NONE"


def test_rest_job_properties():
    job = _job(env={"FOO": "a,b"}, mem_per_node_mib=512, nodelist=["cpu2"], time_limit_seconds=5 * 60, export="NONE")
    props = job_properties(build_request(job, partition="cpu"), {"HOME": "/root"})
    assert props["environment"]["FOO"] == "a,b" and "HOME" not in props["environment"]
    assert (props["nodes"], props["nodelist"], props["memory_per_node"], props["time_limit"], props["comment"]) == (
        [1, 1], "cpu2", 512, 5, "crossdock:42:1")


# --- backend logic over an in-memory driver -------------------------------------------------


class MemoryDriver:
    """Keeps submitted jobs in a list; ``down`` makes every call raise SlurmUnavailable."""

    name = "memory"

    def __init__(self):
        self.submitted: list = []
        self.records: list[SlurmJob] = []
        self.down = 0

    def _check(self):
        if self.down:
            self.down -= 1
            raise SlurmUnavailable("Unable to contact slurm controller (connect failure)")

    def submit(self, request):
        self._check()
        self.submitted.append(request)
        job_id = 100 + len(self.submitted)
        self.records.append(SlurmJob(job_id=job_id, state="PENDING", reason="Priority", exit_code=0, signal=None,
                                     comment=request.comment))
        return job_id

    def jobs(self):
        self._check()
        return list(self.records)

    def launch_timeout_s(self):
        return 20.0  # Slurm's defaults: BatchStartTimeout 10 s + MessageTimeout 10 s

    def batch_launched(self, job_id):
        return True


def test_replayed_dispatch_submits_once():
    driver = MemoryDriver()
    backend = SlurmBackend(driver)
    job = _job()
    assert backend.submit(job) == backend.submit(job) == "101"
    assert len(driver.submitted) == 1
    retry = _job(attempt=2)  # a new attempt is a new submission
    assert backend.submit(retry) == "102"


def test_submit_retries_while_slurm_is_unavailable():
    driver = MemoryDriver()
    driver.down = 5
    now = [0.0]
    backend = SlurmBackend(driver, submit_retry_s=30, retry_interval_s=2, clock=lambda: now[0],
                           sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert backend.submit(_job()) == "101"
    assert now[0] == 10.0 and len(driver.submitted) == 1


def test_submit_gives_up_after_the_retry_window():
    driver = MemoryDriver()
    driver.down = 1000
    now = [0.0]
    backend = SlurmBackend(driver, submit_retry_s=5, retry_interval_s=1, clock=lambda: now[0],
                           sleep=lambda s: now.__setitem__(0, now[0] + s))
    with pytest.raises(SlurmUnavailable):
        backend.submit(_job())
    assert driver.submitted == []


def test_status_sums_up_an_array_and_reports_unknown_refs():
    driver = MemoryDriver()
    driver.records = [
        SlurmJob(job_id=11, state="COMPLETED", reason="None", exit_code=0, signal=None, array_job_id=10, array_task_id=0),
        SlurmJob(job_id=12, state="FAILED", reason="NonZeroExitCode", exit_code=2, signal=None, array_job_id=10, array_task_id=1),
        SlurmJob(job_id=10, state="PENDING", reason="JobArrayTaskLimit", exit_code=0, signal=None, array_job_id=10,
                 array_pending_tasks=(2, 3)),
    ]
    backend = SlurmBackend(driver)
    got = backend.status_refs(["10", "10_1", "10_3", "99"])
    assert got["10"].state == JobState.PENDING and sorted(got["10"].tasks) == [0, 1, 2, 3]
    assert (got["10_1"].state, got["10_1"].exit_code) == (JobState.FAILED, 2)
    assert (got["10_3"].state, got["10_3"].reason) == (JobState.PENDING, Reason.ARRAY_TASK_LIMIT)
    assert got["99"].state is None
    driver.records = driver.records[:2]
    done = backend.status_refs(["10"])["10"]
    assert (done.state, done.exit_code) == (JobState.FAILED, 2)


# --- scontrol show job -o (the CLI driver's job listing) -----------------------------------

PENDING_ARRAY_LINE = (
    "JobId=3265 ArrayJobId=3265 ArrayTaskId=2-5%2 ArrayTaskThrottle=2 JobName=wrap UserId=root(0) GroupId=root(0) "
    "JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 ExitCode=0:0 Partition=gpu-a100 "
    "AllocNode:Sid=localhost:2955 NodeList= NumNodes=1 NumCPUs=1 CPUs/Task=1 Comment=crossdock:7:0  StdOut=/dev/null "
    "Power= TresPerNode=gres:gpu:a100:2 "
)
FOREIGN_LINE = (
    "JobId=115 JobName=my job UserId=alice(1000) JobState=CANCELLED Reason=None Restarts=2 ExitCode=0:15 "
    "Partition=gpu-l4 NodeList=gpu-l4-1 NumNodes=1 NumCPUs=3 Comment=not ours  StdErr=/dev/null TresPerNode=gres:gpu:l4:2 "
)


def test_parse_scontrol_pending_array_rest():
    from crossdock.backends.slurm.cli import parse_scontrol_job

    j = parse_scontrol_job(PENDING_ARRAY_LINE)
    assert (j.job_id, j.array_job_id, j.array_task_id, j.array_pending_tasks) == (3265, 3265, None, (2, 3, 4, 5))
    assert (j.state, j.reason, j.comment, j.nodes, j.gpus) == ("PENDING", "JobArrayTaskLimit", "crossdock:7:0", (), {"a100": 2})


def test_parse_scontrol_values_with_spaces_and_signals():
    from crossdock.backends.slurm.cli import parse_scontrol_job

    j = parse_scontrol_job(FOREIGN_LINE)
    assert (j.name, j.user, j.comment, j.exit_code, j.signal, j.restarts, j.cpus) == (
        "my job", "alice", "not ours", 0, 15, 2, 3)
    assert (j.ref, j.nodes, j.gpus) == ("115", ("gpu-l4-1",), {"l4": 2})


def test_backend_status_by_job_follows_tags_and_array_tasks():
    from crossdock.queue.ports import Backend

    driver = MemoryDriver()
    backend = SlurmBackend(driver)
    assert isinstance(backend, Backend)
    plain = _job(job_id=5, attempt=0)
    ref = backend.submit(plain)
    driver.records = [
        SlurmJob(job_id=int(ref), state="FAILED", reason="NonZeroExitCode", exit_code=3, signal=None,
                 comment=job_tag(5, 0), nodes=("cpu1",)),
        SlurmJob(job_id=31, state="RUNNING", reason="None", exit_code=0, signal=None, comment=job_tag(30, 2),
                 array_job_id=30, array_task_id=4, nodes=("cpu2",), restarts=1),
    ]
    task = _job(job_id=34, attempt=2).model_copy(update={"array_job_id": 30, "array_task_id": 4})
    stranger = _job(job_id=6, attempt=0)
    got = backend.status([plain, task, stranger])
    assert set(got) == {5, 34}  # unknown jobs are absent
    assert (got[5].state, got[5].exit_code, got[5].ref, got[5].nodes) == (JobState.FAILED, 3, ref, ("cpu1",))
    assert (got[34].state, got[34].ref, got[34].extra["restarts"]) == (JobState.RUNNING, "30_4", "1")
    # A ref left over from attempt 0 says nothing about attempt 1.
    retried = plain.model_copy(update={"attempts": 1, "backend_ref": ref})
    assert backend.status([retried]) == {}


def test_a_backend_keeps_the_prefix_it_was_built_with(monkeypatch):
    """Two installations in one process (or an environment changed later): each backend tags and
    finds its own jobs under the prefix it was built with, not the environment's of the moment."""
    driver = MemoryDriver()
    ours, theirs = SlurmBackend(driver, prefix="a1"), SlurmBackend(driver, prefix="b2")
    job = _job(job_id=5, attempt=0)
    ref = ours.submit(job)
    assert driver.submitted[-1].comment == "crossdock/a1:5:0"
    monkeypatch.setenv("CROSSDOCK_PREFIX", "b2")
    driver.records = [SlurmJob(job_id=int(ref), state="RUNNING", reason="None", exit_code=0, signal=None,
                               comment="crossdock/a1:5:0", nodes=("cpu1",))]
    assert ours.status([job])[5].state is JobState.RUNNING
    assert theirs.status([job]) == {}  # not theirs, whatever the environment says


def test_a_store_started_afresh_does_not_take_an_earlier_stores_jobs_for_its_own():
    """slurmctld remembers jobs of a store since wiped (ids from 1 again, the same prefix): the new
    store's job 1 is not the old job 1, whether the old one was tagged before stores had an
    identity or with the old store's own; it is submitted, and the old ones are foreign."""
    driver = MemoryDriver()
    old = [SlurmJob(job_id=7, state="RUNNING", reason="None", exit_code=0, signal=None, comment="crossdock:1:0",
                    nodes=("cpu1",)),
           SlurmJob(job_id=8, state="COMPLETED", reason="None", exit_code=3, signal=None,
                    comment="crossdock:2:0@0ld0ld0ld0ld")]
    driver.records = list(old)
    fresh = SlurmBackend(driver, prefix="cd", installation=lambda: ("a1b2c3d4e5f6", False))
    one, two = _job(job_id=1, attempt=0), _job(job_id=2, attempt=0)
    assert fresh.find(one) is None and fresh.find(two) is None
    assert fresh.status([one, two]) == {}  # nothing of theirs reported as ours: both are lost, not "ended"
    assert fresh.submit(one) == "101" and driver.submitted[-1].comment == "crossdock:1:0@a1b2c3d4e5f6"
    assert fresh.submit(one) == "101"  # a replay finds its own
    driver.nodes = driver.partitions = list
    assert [j.job_id for j in fresh.cluster().foreign_jobs] == [7]  # the old running one holds cpu1
    # a store an earlier release wrote (an upgrade) still knows its jobs tagged then, and not another store's
    upgraded = SlurmBackend(driver, prefix="cd", installation=lambda: ("c0ffeec0ffee", True))
    assert upgraded.find(one) == "7" and upgraded.find(two) is None
    assert upgraded.status([one])[1].state is JobState.RUNNING
    assert upgraded.tags.parse("crossdock:1:0") == (1, 0) and upgraded.tags.parse("crossdock:1:0@other") is None


class FakeStore:
    """The preemption the backend records (the rest of the store is not needed)."""

    def __init__(self):
        self.preempted: dict[int, float] = {}

    def request_preempt(self, job_id, grace_seconds):
        self.preempted[job_id] = grace_seconds


class StopDriver(MemoryDriver):
    """Records what the backend asks Slurm to do to a job: signal, cancel, requeue."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        self.signal = lambda ref, sig: self.calls.append((f"signal {sig}", ref))
        self.cancel = lambda ref: self.calls.append(("cancel", ref))
        self.requeue = lambda ref: self.calls.append(("requeue", ref))

    def show(self, ref: str, state: str, restarts: int = 0, job_id: int = 8, attempt: int = 0) -> None:
        self.records = [SlurmJob(job_id=int(ref), state=state, reason="None", exit_code=0, signal=None,
                                 comment=job_tag(job_id, attempt), restarts=restarts)]


def _victim(backend, driver, deadline_in: float | None):
    """A job submitted and running in Slurm, preempted by the leader with a deadline ``deadline_in`` s away."""
    job = _job(job_id=8, attempt=0)
    ref = backend.submit(job)
    driver.show(ref, "RUNNING")
    deadline = None if deadline_in is None else datetime.fromtimestamp(time.time() + deadline_in, timezone.utc)
    return ref, job.model_copy(update={"backend_ref": ref, "preempt_requested": True, "preempt_grace": 5,
                                       "preempt_deadline": deadline})


def test_preempt_signals_and_returns_the_grace_period_is_left_to_the_status_pass():
    driver, store = StopDriver(), FakeStore()
    backend = SlurmBackend(driver, store=store)
    ref, job = _victim(backend, driver, deadline_in=60)
    backend.preempt(job, 5)  # nothing sleeps: the task returns once the signal is sent
    assert driver.calls == [("signal TERM", ref)] and store.preempted == {8: 5}
    assert backend.status([job])[8].state is JobState.RUNNING  # within its grace: left alone
    assert driver.calls == [("signal TERM", ref)]
    late = job.model_copy(update={"preempt_deadline": datetime.fromtimestamp(time.time() - 1, timezone.utc)})
    assert backend.status([late])[8].state is JobState.RUNNING
    assert driver.calls[-1] == ("cancel", ref)  # past its deadline and still running: stopped


def test_preempt_without_grace_stops_at_once():
    driver = StopDriver()
    backend = SlurmBackend(driver, store=FakeStore())
    ref, job = _victim(backend, driver, deadline_in=0)
    backend.preempt(job, 0)
    assert driver.calls == [("cancel", ref)]


def test_requeue_policy_hands_the_job_back_to_crossdock_not_to_slurm():
    """Slurm requeues the victim (``scontrol requeue``); crossdock then cancels the requeued Slurm
    job, so that Slurm cannot start it again on the GPU that was freed, and reports it PREEMPTED
    (the follower requeues it as a new crossdock attempt)."""
    driver = StopDriver()
    backend = SlurmBackend(driver, store=FakeStore(), preempt_policy="requeue")
    ref, job = _victim(backend, driver, deadline_in=-1)
    backend.status([job])
    assert driver.calls == [("requeue", ref)]
    driver.show(ref, "PENDING", restarts=1)
    st = backend.status([job])[8]
    assert (st.state, st.reason) == (JobState.PREEMPTED, Reason.PREEMPTED) and driver.calls[-1] == ("cancel", ref)
    # Restarted by Slurm before crossdock saw it pending: cancelled, never requeued a second time.
    driver.calls.clear()
    driver.show(ref, "RUNNING", restarts=1)
    backend.status([job])
    assert driver.calls == [("cancel", ref)]


def test_slurm_reports_how_a_preempted_job_exited_the_follower_decides():
    """A victim that exits on SIGTERM is FAILED in Slurm: the backend reports that as it is; the
    stop request in the store turns it into PREEMPTED (``stopped_outcome``, in the follower)."""
    driver = StopDriver()
    backend = SlurmBackend(driver, store=FakeStore())
    ref, job = _victim(backend, driver, deadline_in=60)
    driver.records = [SlurmJob(job_id=int(ref), state="FAILED", reason="NonZeroExitCode", exit_code=0, signal=15,
                               comment=job_tag(8, 0))]
    st = backend.status([job])[8]
    assert (st.state, st.signal) == (JobState.FAILED, 15) and driver.calls == []


def test_gres_type_is_spelt_as_the_node_declares_it():
    from crossdock.backends.slurm.driver import SlurmNode, SlurmPartition

    driver = MemoryDriver()
    driver.nodes = lambda: [SlurmNode("gpu-a100-1", "idle", (), ("gpu-a100",), 16, 0, 64000, 0, {"a100": 8}, {}),
                            SlurmNode("gpu-h", "idle", (), ("gpu-h",), 16, 0, 64000, 0, {"H100_80GB": 4}, {})]
    driver.partitions = lambda: [SlurmPartition("gpu-a100", ("gpu-a100-1",)), SlurmPartition("gpu-h", ("gpu-h",))]
    backend = SlurmBackend(driver)
    for model, native, nodes in (("A100", "a100", ["gpu-a100-1"]), ("h100_80gb", "H100_80GB", []),
                                 ("L4", "L4", [])):  # a model no node has goes as given: sbatch says no
        job = _job(job_id=9, attempt=0, gpus=GpuRequest(count=1, type=model)).model_copy(update={"nodes": nodes})
        backend.submit(job, fresh=True)
        assert driver.submitted[-1].gres == (f"gpu:{native}:1",), model


def test_inventory_maps_partitions_to_pools_and_gpus_to_devices():
    from crossdock.backends.slurm.driver import SlurmNode, SlurmPartition
    from crossdock.queue.config import ClusterConfig

    config = ClusterConfig.model_validate({
        "priority_classes": {"p": {"value": 1}},
        "pools": {"hpc-a100": {"backend": "slurm", "partition": "gpu-a100", "gpu": {"model": "A100"}},
                  "hpc-cpu": {"backend": "slurm", "partition": "cpu"}},
        "queues": {"q": {"priority_class": "p", "pools": ["hpc-a100", "hpc-cpu"]}},
    })
    driver = MemoryDriver()
    driver.nodes = lambda: [
        SlurmNode("gpu-a100-1", "mixed", (), ("gpu-a100", "high"), 16, 4, 64000, 0, {"a100": 8}, {"a100": 2}),
        SlurmNode("cpu1", "idle", ("drain",), ("cpu", "high"), 8, 0, 16000, 0, {}, {}),
        SlurmNode("gpu-l4-1", "idle", (), ("gpu-l4", "high"), 8, 0, 32000, 0, {"l4": 4}, {}),
    ]
    driver.partitions = lambda: [SlurmPartition("cpu", ("cpu1",)), SlurmPartition("gpu-a100", ("gpu-a100-1",)),
                                 SlurmPartition("gpu-l4", ("gpu-l4-1",))]
    driver.records = [SlurmJob(job_id=3, state="RUNNING", reason="None", exit_code=0, signal=None, comment="theirs",
                               nodes=("gpu-a100-1",), cpus=4, memory_mib=400, gpus={"a100": 2}, user="bob")]
    inv = SlurmBackend(driver, config=config).inventory()
    nodes = {n.name: n for n in inv.nodes}
    assert set(nodes) == {"gpu-a100-1", "cpu1"}  # gpu-l4-1 is in no configured pool
    a100 = nodes["gpu-a100-1"]
    assert (a100.pool, a100.backend, a100.cpu_milli, a100.memory_mib) == ("hpc-a100", "slurm", 16000, 64000)
    assert [g.model for g in a100.gpus] == ["A100"] * 8 and a100.gpus[7].id == "gpu-a100-1:7"
    assert nodes["cpu1"].schedulable is False
    (alloc,) = inv.foreign
    assert (alloc.node, alloc.cpu_milli, alloc.memory_mib, alloc.gpu_ids, alloc.user) == (
        "gpu-a100-1", 4000, 400, ("gpu-a100-1:7", "gpu-a100-1:6"), "bob")


def test_array_task_alone_is_a_plain_job_with_its_task_environment():
    job = _job(job_id=12, attempt=0, stdout="/tmp/out-%A_%3a-%j.txt",
               array=ArraySpec(task_ids=[0, 4, 9], max_running=1))
    task = job.model_copy(update={"array_job_id": 10, "array_task_id": 4})
    req = build_request(task)
    assert req.array is None and req.stdout == "/tmp/out-10_004-12.txt"  # %j: the task's own crossdock id
    assert {k: req.env[k] for k in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
                                    "CROSSDOCK_JOB_ID")} == {"SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "4",
                                                             "SLURM_ARRAY_TASK_COUNT": "3", "CROSSDOCK_JOB_ID": "12"}
    assert build_request(job).array == "0,4,9%1"


@pytest.mark.parametrize("argv,expected", [
    pytest.param(["-C", "a100&[rack1|rack2]"], "--constraint=a100&[rack1|rack2]", id="constraint-as-is"),
    pytest.param(["--signal=B:USR1@90"], "--signal=B:USR1@90", id="signal"),
    pytest.param(["--signal=R:TERM"], "--signal=R:TERM@60", id="signal-default-time"),
    pytest.param(["--time-min=1:30"], "--time-min=2", id="time-min-minutes"),
    pytest.param(["--reservation=maint"], "--reservation=maint", id="reservation"),
    pytest.param(["-L", "matlab:2,ansys"], "--licenses=matlab:2,ansys:1", id="licenses"),
    pytest.param(["--begin=2030-01-02T03:04:05"], "--begin=", id="begin"),
    pytest.param(["--deadline=2030-01-02T03:04:05"], "--deadline=", id="deadline"),
])
def test_sbatch_options_pass_the_slurm_only_options(argv, expected):
    from crossdock.queue.sbatch import build_spec

    spec = build_spec([*argv, "--wrap", "true"]).spec
    opts = sbatch_options(build_request(Job(id=42, spec=spec, attempts=1), workdir="/tmp"))
    assert any(o.startswith(expected) for o in opts), opts
    if argv[0].startswith(("--begin", "--deadline")):
        (given,) = [o for o in opts if o.startswith(expected)]
        # Slurm reads the local time of the submit host
        assert datetime.strptime(given.split("=")[1], "%Y-%m-%dT%H:%M:%S").astimezone() == (spec.begin or spec.deadline)
