"""Kubernetes pod and Job conditions → crossdock job states.

``K8S_STATES`` is the whole translation. Its keys are *signals* read off a pod or a Job
(a condition with its reason, a container's waiting/terminated reason, the pod phase);
its order is the precedence: the first signal present on an object decides. Everything
else in this module only reads signals and exit codes out of the API's JSON.

Objects are the JSON the API server sends (camelCase dicts), as the backend reads them
with ``_preload_content=False``: no client model classes, so this module stays pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crossdock.queue.states import JobState, Reason

# signal → (crossdock state, reason). First match wins, top to bottom.
K8S_STATES: dict[str, tuple[JobState, str]] = {
    # Disrupted by the system: the pod carries DisruptionTarget with who did it.
    "pod/DisruptionTarget/PreemptionByScheduler": (JobState.PREEMPTED, "PreemptedByScheduler"),
    "pod/DisruptionTarget/PreemptionByKubeScheduler": (JobState.PREEMPTED, "PreemptedByScheduler"),  # ≤ 1.27
    "pod/DisruptionTarget/EvictionByEvictionAPI": (JobState.PREEMPTED, "Evicted"),
    "pod/DisruptionTarget/TerminationByKubelet": (JobState.PREEMPTED, "Evicted"),  # node pressure, shutdown
    "pod/DisruptionTarget/DeletionByTaintManager": (JobState.NODE_FAIL, Reason.NODE_LOST),
    "pod/DisruptionTarget/DeletionByPodGC": (JobState.NODE_FAIL, Reason.NODE_LOST),
    "pod/DisruptionTarget": (JobState.PREEMPTED, "Disrupted"),  # a reason this table does not know yet
    # Killed by the kubelet before or while running.
    "pod/reason/Evicted": (JobState.PREEMPTED, "Evicted"),
    "pod/reason/DeadlineExceeded": (JobState.TIMEOUT, Reason.TIME_LIMIT),
    "pod/reason/NodeLost": (JobState.NODE_FAIL, Reason.NODE_LOST),
    "pod/reason/UnexpectedAdmissionError": (JobState.NODE_FAIL, "UnexpectedAdmissionError"),
    "container/terminated/OOMKilled": (JobState.OUT_OF_MEMORY, "OutOfMemory"),
    # Cannot start and will not recover by waiting.
    "container/waiting/InvalidImageName": (JobState.FAILED, "InvalidImageName"),
    "container/waiting/CreateContainerConfigError": (JobState.FAILED, "CreateContainerConfigError"),
    "container/waiting/CreateContainerError": (JobState.FAILED, "CreateContainerError"),
    "container/waiting/RunContainerError": (JobState.FAILED, "RunContainerError"),
    # Final phases.
    "pod/phase/Failed": (JobState.FAILED, Reason.NON_ZERO_EXIT),
    "pod/phase/Succeeded": (JobState.COMPLETED, Reason.NONE),
    # Waiting on the node: placed, not running yet; the reason tells the user why.
    "container/waiting/ImagePullBackOff": (JobState.SCHEDULED, "ImagePullBackOff"),
    "container/waiting/ErrImagePull": (JobState.SCHEDULED, "ErrImagePull"),
    "pod/PodScheduled=False/SchedulingGated": (JobState.SCHEDULED, "SchedulingGated"),
    "pod/PodScheduled=False/Unschedulable": (JobState.SCHEDULED, "Unschedulable"),
    "pod/phase/Unknown": (JobState.RUNNING, "NodeUnreachable"),
    "pod/phase/Running": (JobState.RUNNING, Reason.NONE),
    "pod/phase/Pending": (JobState.SCHEDULED, "ContainerCreating"),
    # Job conditions, for when no pod tells more (pods gone, or deleted by the Job controller).
    "job/Failed/DeadlineExceeded": (JobState.TIMEOUT, Reason.TIME_LIMIT),
    "job/Failed/PodFailurePolicy": (JobState.PREEMPTED, "Disrupted"),  # FailJob on DisruptionTarget
    "job/Failed/BackoffLimitExceeded": (JobState.FAILED, Reason.NON_ZERO_EXIT),
    "job/Failed/MaxFailedIndexesExceeded": (JobState.FAILED, Reason.NON_ZERO_EXIT),
    "job/Failed": (JobState.FAILED, "JobFailed"),
    "job/Complete": (JobState.COMPLETED, Reason.NONE),
    "job/SuccessCriteriaMet": (JobState.COMPLETED, Reason.NONE),
    "job/Suspended": (JobState.SCHEDULED, "Suspended"),
    "job/active": (JobState.SCHEDULED, "WaitingForPods"),
}

# Worst first: how the pods of a multi-pod Job (a gang) sum up once one of them ended badly.
WORST_FIRST: tuple[JobState, ...] = (JobState.NODE_FAIL, JobState.PREEMPTED, JobState.OUT_OF_MEMORY,
                                     JobState.TIMEOUT, JobState.FAILED, JobState.CANCELLED)


class UnknownSignal(KeyError):
    """A signal missing from ``K8S_STATES`` (a bug in this module, never the cluster's fault)."""


@dataclass(frozen=True)
class Translated:
    state: JobState
    reason: str
    signal: str
    """The ``K8S_STATES`` key that decided (shown as the native state)."""
    exit_code: int | None = None
    signal_number: int | None = None
    message: str = ""


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def pod_signals(pod: Mapping[str, Any]) -> list[str]:
    """Every signal a pod shows (order irrelevant: the table orders them)."""
    status = pod.get("status") or {}
    found: list[str] = []
    for c in _conditions(pod):
        kind, value, reason = c.get("type", ""), c.get("status", ""), c.get("reason") or ""
        if kind == "DisruptionTarget" and value == "True":
            found += [f"pod/DisruptionTarget/{reason}", "pod/DisruptionTarget"]
        elif kind == "PodScheduled" and value == "False":
            found.append(f"pod/PodScheduled=False/{reason}")
    if status.get("reason"):
        found.append(f"pod/reason/{status['reason']}")
    for cs in _containers(pod):
        state = cs.get("state") or {}
        for kind in ("terminated", "waiting"):
            if state.get(kind) and state[kind].get("reason"):
                found.append(f"container/{kind}/{state[kind]['reason']}")
    found.append(f"pod/phase/{status.get('phase') or 'Pending'}")
    return found


def job_signals(job: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for c in _conditions(job):
        if c.get("status") != "True":
            continue
        kind, reason = c.get("type", ""), c.get("reason") or ""
        if kind == "Failed":
            found += [f"job/Failed/{reason}", "job/Failed"]
        elif kind in ("Complete", "SuccessCriteriaMet", "Suspended"):
            found.append(f"job/{kind}")
    found.append("job/active")
    return found


def decide(signals: Iterable[str]) -> tuple[str, JobState, str]:
    """The first table entry (in table order) among ``signals``."""
    present = set(signals)
    for key, (state, reason) in K8S_STATES.items():
        if key in present:
            return key, state, str(reason)
    raise UnknownSignal(f"none of {sorted(present)} is in K8S_STATES; add it in {__name__}")


def exit_status(pod: Mapping[str, Any], container: str | None = None) -> tuple[int | None, int | None]:
    """(exit code, signal) of the pod's main container once it terminated; (None, None) before.

    The main container is ``container`` when given, else the first that terminated with a
    non-zero code, else the first that terminated. A code above 128 without an explicit
    signal is read the shell's way (137 → SIGKILL).
    """
    done = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term is not None and (container is None or cs.get("name") == container):
            done.append(term)
    if not done:
        return None, None
    term = next((t for t in done if t.get("exitCode")), done[0])
    code = int(term.get("exitCode") or 0)
    sig = term.get("signal")
    if sig is None and code > 128:
        sig = code - 128
    return code, (int(sig) if sig else None)


def _message(obj: Mapping[str, Any], signal: str) -> str:
    status = obj.get("status") or {}
    for c in _conditions(obj):
        if c.get("message") and (c.get("reason") or "") in signal:
            return str(c["message"])
    for cs in _containers(obj):
        for kind in ("terminated", "waiting"):
            part = (cs.get("state") or {}).get(kind) or {}
            if part.get("message") and f"/{part.get('reason')}" in signal:
                return str(part["message"])
    return str(status.get("message") or "")


def translate_pod(pod: Mapping[str, Any]) -> Translated:
    key, state, reason = decide(pod_signals(pod))
    code, sig = exit_status(pod) if state.terminal or state is JobState.PREEMPTED else (None, None)
    return Translated(state, reason, key, code, sig, _message(pod, key))


def translate_job(job: Mapping[str, Any]) -> Translated:
    key, state, reason = decide(job_signals(job))
    return Translated(state, reason, key, message=_message(job, key))


def summarize(pods: list[Translated], expected: int) -> tuple[JobState, str]:
    """One state for the ``expected`` pods of a Job from the pods seen so far.

    Any pod that ended badly decides (worst first); all ``expected`` completed → COMPLETED;
    all running → RUNNING; else the Job is still being placed (SCHEDULED), and the reason
    says how far (``Unschedulable``, ``2/4 running``…).
    """
    states = {p.state for p in pods}
    for bad in WORST_FIRST:
        if bad in states:
            return bad, next(p.reason for p in pods if p.state is bad)
    done = sum(p.state is JobState.COMPLETED for p in pods)
    running = sum(p.state is JobState.RUNNING for p in pods)
    if pods and done >= expected:
        return JobState.COMPLETED, Reason.NONE
    if running + done >= expected and running:
        return JobState.RUNNING, next(p.reason for p in pods if p.state is JobState.RUNNING)
    waiting = [p for p in pods if p.state is JobState.SCHEDULED]
    reason = waiting[0].reason if waiting else "WaitingForPods"
    if expected > 1:
        reason = f"{reason} ({running + done}/{expected} running)"
    return JobState.SCHEDULED, reason
