"""Chaos through a Kubernetes pool (kwok nodes, a backend queue): kube-apiserver SIGKILLed and
started again among kills of workers, ``up`` and Redis; every job ends exactly once in its true
state, and the run's history passes the checker.

kwok's pods run nothing, so a job's runs are its pods (started, and ended Succeeded or Failed).
They are counted by a ledger that watches the pods for the whole run and keeps every phase it
saw, rather than from one listing at the end: after a restart the Job controller can lag behind
a pod that already ended, crossdock's reconciler then deletes that Job as an orphan (its job has
ended), and its pods with it, so a final listing missed runs that happened (55 COMPLETED jobs
judged wrong in one full run).

It restarts the shared local plane's kube-apiserver (SIGKILL, started again with the same
arguments; etcd, the controllers and kwok stay up), so the other Kubernetes tests may see the API
server away for a few seconds; the test ends only once it answers ready again. Jobs that a Celery
worker SIGKILLed between its claim and its submit are lost and run again as a new attempt once the
follower sees that dispatch task silent (``DISPATCHER_SILENT_SECONDS``), not after a visibility
timeout.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, watch

from crossdock.backends.kubernetes import manifests as m
from crossdock.dev import k8s
from tests.chaos.checker import check
from tests.chaos.harness import ChaosRun, Fault, Plan, run_chaos, schedule, seed_from_env

pytestmark = [pytest.mark.chaos, pytest.mark.kubernetes, pytest.mark.redis, pytest.mark.celery,
              pytest.mark.timeout(900)]

ENDED = ("Succeeded", "Failed")


def k8s_config() -> dict:
    return {
        "priority_classes": {"batch": {"value": 500, "grace_seconds": 1}},
        "pools": {"cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}, "backend_queue": 100}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["cpu"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 3, "min_job_age_seconds": 3600},
    }


class PodLedger:
    """Every pod of a namespace that was ever bound to a node (it ran), with the furthest phase
    seen: a watch that lists again whenever it breaks (the API server away), and a last listing
    at :meth:`close`. A pod that never left crossdock's gate (a duplicate the Job controller made
    and deleted as excess) never ran, and is only counted."""

    def __init__(self, api: client.CoreV1Api, namespace: str):
        self.api, self.namespace = api, namespace
        self.pods: dict[str, tuple[int, int, str]] = {}
        """uid -> (job id, attempt, phase)."""
        self.origin: dict[str, str] = {}
        """uid -> the pod's name, its owner Job's uid and its creation time (to tell who made a second pod)."""
        self.never_ran: set[str] = set()
        """uids of pods seen only unbound (still gated when deleted)."""
        self.relists = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True, name="pod-ledger")
        self.thread.start()

    def _note(self, pod) -> None:
        labels = pod.metadata.labels or {}
        if m.LABEL_JOB_ID not in labels:
            return
        phase = (pod.status and pod.status.phase) or "Pending"
        with self.lock:
            if not pod.spec.node_name:
                if pod.metadata.uid not in self.pods:
                    self.never_ran.add(pod.metadata.uid)
                return
            self.never_ran.discard(pod.metadata.uid)
            old = self.pods.get(pod.metadata.uid)
            if old is None:
                owners = ",".join(o.uid for o in pod.metadata.owner_references or [])
                self.origin[pod.metadata.uid] = f"{pod.metadata.name} of Job {owners} at {pod.metadata.creation_timestamp}"
            if old is None or old[2] not in ENDED:  # an ended pod stays ended, whatever comes after
                self.pods[pod.metadata.uid] = (int(labels[m.LABEL_JOB_ID]), int(labels.get(m.LABEL_ATTEMPT, 0)), phase)

    def _list(self) -> str:
        listed = self.api.list_namespaced_pod(self.namespace)
        for pod in listed.items:
            self._note(pod)
        return listed.metadata.resource_version

    def _run(self) -> None:
        version = None
        while not self.stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    self.relists += 1
                for event in watch.Watch().stream(self.api.list_namespaced_pod, self.namespace,
                                                  resource_version=version, timeout_seconds=10):
                    self._note(event["object"])  # DELETED carries the pod's last status too
                    version = event["object"].metadata.resource_version
                    if self.stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - the API server is away, or the version expired
                version = None
                self.stop.wait(0.5)

    def close(self, timeout: float = 120.0) -> None:
        """Stop watching, then list once more, retrying until the API server answers."""
        self.stop.set()
        self.thread.join(15)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._list()
                return
            except Exception:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def twice(self) -> list[str]:
        """Where each pod of an attempt that ran more than once came from."""
        by_attempt: dict[tuple[int, int], list[str]] = {}
        with self.lock:
            for uid, (job_id, attempt, phase) in self.pods.items():
                by_attempt.setdefault((job_id, attempt), []).append(f"{self.origin.get(uid)} ended {phase}")
        return [f"job {j} attempt {a}: " + "; ".join(pods) for (j, a), pods in sorted(by_attempt.items())
                if len(pods) > 1]

    def runs(self) -> dict[int, list[tuple[int, str]]]:
        out: dict[int, list[tuple[int, str]]] = {}
        with self.lock:
            for job_id, attempt, phase in self.pods.values():
                out.setdefault(job_id, []).append((attempt, phase))
        return out


class PodCountedRun(ChaosRun):
    """Runs counted from the pods the ledger saw."""
    ledger: PodLedger

    def judge(self):
        self.ledger.close()
        self.note(f"pod ledger: {len(self.ledger.pods)} pods ran, {len(self.ledger.never_ran)} never left the gate,"
                  f" watch listed {self.ledger.relists} times")
        for line in self.ledger.twice():
            self.note(line)
        self.pods = self.ledger.runs()
        return super().judge()

    def marks_of(self, job, plan: Plan):
        runs = self.pods.get(job.id, [])
        return [a for a, _ in runs], [a for a, phase in runs if phase in ENDED]

    def runs(self, job):
        """Each pod of ``job`` that ran, as a start mark (and an end mark once ended): the pod's uid
        is its pid, and no time (the ledger sees a pod when the API server tells, not when it started)."""
        with self.ledger.lock:
            pods = [(uid, a, phase) for uid, (j, a, phase) in self.ledger.pods.items() if j == job.id]
        return [m for uid, a, phase in pods
                for m in [("start", a, uid, None)] + [("end", a, uid, None)] * (phase in ENDED)]


@pytest.fixture
def shared_plane(k8s_kubeconfig, k8s_client):
    """The shared local plane, answering ready again when the test ends (whatever it restarted)."""
    if Path(k8s_kubeconfig).resolve() != k8s.kubeconfig_path().resolve():
        pytest.skip("restarts the local plane's kube-apiserver; KUBECONFIG names another cluster")
    yield
    deadline = time.monotonic() + 120
    while True:
        try:
            client.VersionApi(k8s_client).get_code()
            client.CoreV1Api(k8s_client).list_node()
            return
        except Exception:  # noqa: BLE001 - still starting
            assert time.monotonic() < deadline, "kube-apiserver not answering 120s after the test"
            time.sleep(1)


def test_apiserver_restart_every_job_ends_once(shared_plane, k8s_kubeconfig, k8s_client, k8s_namespace):
    core = client.CoreV1Api(k8s_client)
    namespace = k8s_namespace

    seed = seed_from_env()
    pauses = random.Random(seed ^ 0xA9)

    def restart_apiserver(run: ChaosRun, fault: Fault) -> str:
        # away for a blip or long enough for every client's retries to give up (CI's loaded runs saw 17 s)
        away = k8s.restart_component("kube-apiserver", kill=True, pause=pauses.choice([3.0, 15.0]))
        return f"SIGKILL kube-apiserver, back after {away:.1f}s"

    faults = schedule(random.Random(seed), 40, {"worker": 2, "scheduler": 1, "apiserver": 2}, [2.0])
    root = Path(tempfile.mkdtemp(prefix="crossdock-chaos-k8s-"))
    env = {"CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "KUBECONFIG": str(k8s_kubeconfig),
           "CROSSDOCK_K8S_NAMESPACE": namespace, "CROSSDOCK_K8S_TTL_SECONDS": "3600"}
    run = PodCountedRun(root, k8s_config(), seed, 200, faults, waves=4, wave_every=8, recover_timeout=300,
                        env=env, actions={"apiserver": restart_apiserver}, arrays=0.0)
    run.ledger = PodLedger(core, namespace)
    try:
        verdicts, table = run_chaos(run)
    finally:
        if not os.environ.get("CROSSDOCK_CHAOS_KEEP"):  # keep the state and up.log to read after a failure
            shutil.rmtree(root, ignore_errors=True)
    verdict = check(run.history)
    print(verdict.summary(), flush=True)
    assert not [v for v in verdicts if v.problem], table
    assert verdict.ok, verdict.report()
