"""Pod and Job conditions → crossdock states: the table, its precedence, exit codes, gangs."""

from __future__ import annotations

from typing import Any

import pytest

from crossdock.backends.kubernetes import states
from crossdock.backends.kubernetes.states import K8S_STATES, summarize, translate_job, translate_pod
from crossdock.queue.states import JobState


def pod(phase: str = "Running", *, conditions: list[dict[str, Any]] = (), reason: str | None = None,
        terminated: dict[str, Any] | None = None, waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions)}
    if reason:
        status["reason"] = reason
    state: dict[str, Any] = {}
    if terminated is not None:
        state["terminated"] = terminated
    if waiting is not None:
        state["waiting"] = waiting
    if state:
        status["containerStatuses"] = [{"name": "main", "state": state}]
    return {"metadata": {"name": "p"}, "status": status}


def disrupted(reason: str) -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": f"by {reason}"}


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}

CASES = [
    ("pending-unschedulable", pod("Pending", conditions=[UNSCHEDULABLE]), JobState.SCHEDULED, "Unschedulable"),
    ("pending-gated", pod("Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                                   "reason": "SchedulingGated"}]), JobState.SCHEDULED, "SchedulingGated"),
    ("pending-creating", pod("Pending", waiting={"reason": "ContainerCreating"}), JobState.SCHEDULED,
     "ContainerCreating"),
    ("image-pull-backoff", pod("Pending", waiting={"reason": "ImagePullBackOff", "message": "back-off"}),
     JobState.SCHEDULED, "ImagePullBackOff"),
    ("err-image-pull", pod("Pending", waiting={"reason": "ErrImagePull"}), JobState.SCHEDULED, "ErrImagePull"),
    ("invalid-image", pod("Pending", waiting={"reason": "InvalidImageName"}), JobState.FAILED, "InvalidImageName"),
    ("config-error", pod("Pending", waiting={"reason": "CreateContainerConfigError"}), JobState.FAILED,
     "CreateContainerConfigError"),
    ("running", pod("Running"), JobState.RUNNING, "None"),
    ("unknown-node", pod("Unknown"), JobState.RUNNING, "NodeUnreachable"),
    ("succeeded", pod("Succeeded", terminated={"exitCode": 0, "reason": "Completed"}), JobState.COMPLETED, "None"),
    ("failed-exit", pod("Failed", terminated={"exitCode": 3, "reason": "Error"}), JobState.FAILED,
     "NonZeroExitCode"),
    ("oom", pod("Failed", terminated={"exitCode": 137, "reason": "OOMKilled"}), JobState.OUT_OF_MEMORY,
     "OutOfMemory"),
    ("pod-deadline", pod("Failed", reason="DeadlineExceeded"), JobState.TIMEOUT, "TimeLimit"),
    ("evicted-kubelet", pod("Failed", reason="Evicted"), JobState.PREEMPTED, "Evicted"),
    ("preempted-by-scheduler", pod("Running", conditions=[disrupted("PreemptionByScheduler")]), JobState.PREEMPTED,
     "PreemptedByScheduler"),
    ("preempted-old-name", pod("Running", conditions=[disrupted("PreemptionByKubeScheduler")]), JobState.PREEMPTED,
     "PreemptedByScheduler"),
    ("evicted-api", pod("Running", conditions=[disrupted("EvictionByEvictionAPI")]), JobState.PREEMPTED, "Evicted"),
    ("taint-manager", pod("Running", conditions=[disrupted("DeletionByTaintManager")]), JobState.NODE_FAIL,
     "NodeLost"),
    ("pod-gc", pod("Failed", conditions=[disrupted("DeletionByPodGC")]), JobState.NODE_FAIL, "NodeLost"),
    ("unknown-disruption", pod("Running", conditions=[disrupted("SomethingNew")]), JobState.PREEMPTED, "Disrupted"),
    # Precedence: why it ended beats how it ended.
    ("preempted-then-failed", pod("Failed", conditions=[disrupted("PreemptionByScheduler")],
                                  terminated={"exitCode": 143, "reason": "Error"}), JobState.PREEMPTED,
     "PreemptedByScheduler"),
    ("oom-beats-failed", pod("Failed", terminated={"exitCode": 137, "reason": "OOMKilled"}),
     JobState.OUT_OF_MEMORY, "OutOfMemory"),
    ("disruption-false-ignored", pod("Running", conditions=[{**disrupted("PreemptionByScheduler"), "status": "False"}]),
     JobState.RUNNING, "None"),
]


@pytest.mark.parametrize(("obj", "state", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pod_translation(obj: dict[str, Any], state: JobState, reason: str) -> None:
    t = translate_pod(obj)
    assert (t.state, t.reason) == (state, reason)
    assert t.signal in K8S_STATES


def job(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "status": {"conditions": [
        {"type": kind, "status": "True", "reason": reason, "message": f"{kind} {reason}"} for kind, reason in conditions]}}


JOB_CASES = [
    ("active", job(), JobState.SCHEDULED, "WaitingForPods"),
    ("complete", job(("Complete", "")), JobState.COMPLETED, "None"),
    ("success-criteria", job(("SuccessCriteriaMet", "CompletionsReached")), JobState.COMPLETED, "None"),
    ("deadline", job(("FailureTarget", "DeadlineExceeded"), ("Failed", "DeadlineExceeded")), JobState.TIMEOUT,
     "TimeLimit"),
    ("backoff", job(("Failed", "BackoffLimitExceeded")), JobState.FAILED, "NonZeroExitCode"),
    ("pod-failure-policy", job(("Failed", "PodFailurePolicy")), JobState.PREEMPTED, "Disrupted"),
    ("failed-unknown-reason", job(("Failed", "Whatever")), JobState.FAILED, "JobFailed"),
    ("suspended", job(("Suspended", "JobSuspended")), JobState.SCHEDULED, "Suspended"),
]


@pytest.mark.parametrize(("obj", "state", "reason"), [c[1:] for c in JOB_CASES], ids=[c[0] for c in JOB_CASES])
def test_job_translation(obj: dict[str, Any], state: JobState, reason: str) -> None:
    t = translate_job(obj)
    assert (t.state, t.reason) == (state, reason)


def test_job_message_comes_from_the_deciding_condition() -> None:
    assert translate_job(job(("Failed", "DeadlineExceeded"))).message == "Failed DeadlineExceeded"


@pytest.mark.parametrize(("terminated", "expected"), [
    ({"exitCode": 0}, (0, None)),
    ({"exitCode": 3}, (3, None)),
    ({"exitCode": 137, "reason": "OOMKilled"}, (137, 9)),
    ({"exitCode": 143}, (143, 15)),
    ({"exitCode": 1, "signal": 6}, (1, 6)),
], ids=["zero", "three", "sigkill", "sigterm", "explicit-signal"])
def test_exit_status(terminated: dict[str, Any], expected: tuple[int, int | None]) -> None:
    assert states.exit_status(pod("Failed", terminated=terminated)) == expected


def test_no_exit_code_while_running() -> None:
    assert translate_pod(pod("Running")).exit_code is None
    assert states.exit_status(pod("Running")) == (None, None)


def test_exit_code_prefers_the_failing_container() -> None:
    p = pod("Failed")
    p["status"]["containerStatuses"] = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
        {"name": "main", "state": {"terminated": {"exitCode": 7}}},
    ]
    assert translate_pod(p).exit_code == 7


def test_every_table_state_is_reachable_from_a_signal_reader() -> None:
    """Each key has the shape the readers produce, so no row is dead."""
    prefixes = ("pod/DisruptionTarget", "pod/reason/", "pod/phase/", "pod/PodScheduled=False/",
                "container/terminated/", "container/waiting/", "job/")
    assert all(k.startswith(prefixes) for k in K8S_STATES)


def test_unknown_signals_only_is_a_named_error() -> None:
    with pytest.raises(states.UnknownSignal, match="add it"):
        states.decide(["pod/phase/Martian"])


def T(state: JobState, reason: str = "None") -> states.Translated:
    return states.Translated(state, reason, "x")


@pytest.mark.parametrize(("pods", "expected", "want"), [
    ([T(JobState.RUNNING)] * 4, 4, (JobState.RUNNING, "None")),
    ([T(JobState.RUNNING)] * 3 + [T(JobState.SCHEDULED, "Unschedulable")], 4,
     (JobState.SCHEDULED, "Unschedulable (3/4 running)")),
    ([T(JobState.RUNNING)] * 2, 4, (JobState.SCHEDULED, "WaitingForPods (2/4 running)")),
    ([T(JobState.COMPLETED)] * 3 + [T(JobState.RUNNING)], 4, (JobState.RUNNING, "None")),
    ([T(JobState.COMPLETED)] * 4, 4, (JobState.COMPLETED, "None")),
    ([T(JobState.RUNNING)] * 3 + [T(JobState.PREEMPTED, "PreemptedByScheduler")], 4,
     (JobState.PREEMPTED, "PreemptedByScheduler")),
    ([T(JobState.FAILED, "NonZeroExitCode"), T(JobState.NODE_FAIL, "NodeLost")], 2, (JobState.NODE_FAIL, "NodeLost")),
    ([], 1, (JobState.SCHEDULED, "WaitingForPods")),
], ids=["all-running", "one-unschedulable", "two-missing", "finishing", "all-done", "one-preempted",
        "worst-first", "no-pods"])
def test_gang_summary(pods: list[states.Translated], expected: int, want: tuple[JobState, str]) -> None:
    assert summarize(pods, expected) == want
