"""Chaos through a Kubernetes pool (kwok nodes, a backend queue): kube-apiserver SIGKILLed and
started again among kills of workers, ``up`` and Redis; every job ends exactly once in its true
state. kwok's pods run nothing, so a job's runs are its pods (started, and ended Succeeded or
Failed) rather than lines it wrote.

It restarts the local control plane's API server: never run it where others share that plane
(``-m "chaos and kubernetes"`` selects it; CI runs it on a plane of its own).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from crossdock.backends.kubernetes import manifests as m
from crossdock.dev import k8s
from tests.chaos.harness import ChaosRun, Fault, Plan, run_chaos, schedule, seed_from_env

pytestmark = [pytest.mark.chaos, pytest.mark.kubernetes, pytest.mark.redis, pytest.mark.celery,
              pytest.mark.timeout(900)]


def k8s_config() -> dict:
    return {
        "priority_classes": {"batch": {"value": 500, "grace_seconds": 1}},
        "pools": {"cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}, "backend_queue": 100}},
        "queues": {"batch": {"priority_class": "batch", "pools": ["cpu"]}},
        "default_queue": "batch",
        "scheduler": {"interval_seconds": 0.3, "lease_seconds": 3, "min_job_age_seconds": 3600},
    }


class PodCountedRun(ChaosRun):
    """Runs counted from the pods of each job's Jobs (kept by a long TTL)."""
    api: client.CoreV1Api
    namespace: str

    def judge(self):
        self.pods: dict[int, list[tuple[int, str]]] = {}
        for pod in self.api.list_namespaced_pod(self.namespace).items:
            labels = pod.metadata.labels or {}
            if m.LABEL_JOB_ID in labels:
                self.pods.setdefault(int(labels[m.LABEL_JOB_ID]), []).append(
                    (int(labels.get(m.LABEL_ATTEMPT, 0)), pod.status.phase))
        return super().judge()

    def marks_of(self, job, plan: Plan):
        runs = self.pods.get(job.id, [])
        return [a for a, _ in runs], [a for a, phase in runs if phase in ("Succeeded", "Failed")]


def restart_apiserver(run: ChaosRun, fault: Fault) -> str:
    away = k8s.restart_component("kube-apiserver", kill=True, pause=5.0)
    return f"SIGKILL kube-apiserver, back after {away:.1f}s"


def test_apiserver_restart_every_job_ends_once(k8s_kubeconfig, k8s_client, k8s_namespace):
    seed = seed_from_env()
    faults = schedule(random.Random(seed), 40, {"worker": 2, "scheduler": 1, "apiserver": 2}, [2.0])
    root = Path(tempfile.mkdtemp(prefix="crossdock-chaos-k8s-"))
    env = {"CROSSDOCK_KUBECONFIG": str(k8s_kubeconfig), "CROSSDOCK_K8S_NAMESPACE": k8s_namespace,
           "CROSSDOCK_K8S_TTL_SECONDS": "3600"}
    run = PodCountedRun(root, k8s_config(), seed, 200, faults, waves=4, wave_every=8, recover_timeout=300,
                        env=env, actions={"apiserver": restart_apiserver}, arrays=0.0)
    run.api, run.namespace = client.CoreV1Api(k8s_client), k8s_namespace
    verdicts, table = run_chaos(run)
    assert not [v for v in verdicts if v.problem], table
