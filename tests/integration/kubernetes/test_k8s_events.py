"""Kubernetes Events on the Jobs crossdock creates, on a real control plane: ``Submitted`` on
create, ``Preempting`` and ``Cancelling`` on a stop, each naming the Job by uid (what ``kubectl
describe job`` selects on) with crossdock's reason in its message; a replayed dispatch posts none."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import manifests as m
from crossdock.queue.config import parse_config
from crossdock.queue.models import Job, JobSpec
from k8s_helpers import wait_for

pytestmark = [pytest.mark.kubernetes, pytest.mark.operate]

CONFIG: dict[str, Any] = {
    "priority_classes": {"training": {"value": 100, "preemptible": True, "grace_seconds": 1}},
    "pools": {"cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}}},
    "queues": {"training": {"priority_class": "training", "pools": ["cpu"]}},
}


@pytest.fixture
def backend(k8s_client: client.ApiClient, k8s_namespace: str):
    b = KubernetesBackend(parse_config(CONFIG), k8s_client, namespace=k8s_namespace, watch=False)
    yield b
    b.close()


def job(job_id: int) -> Job:
    env = {"CROSSDOCK_SIMULATE_RUN_SECONDS": "600"}
    return Job(id=job_id, spec=JobSpec(command=["python", "work.py"], env=env, user="alice"), queue="training",
               priority_class="training", priority=100, preemptible=True, pools=["cpu"], pool="cpu",
               attempts=1, backend="k8s")


def events_of(core: client.CoreV1Api, ns: str, name: str) -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            if e.source and e.source.component == "crossdock"]


def test_submit_preempt_and_cancel_post_events_on_the_job(backend, k8s_client, k8s_namespace):
    core, batch = client.CoreV1Api(k8s_client), client.BatchV1Api(k8s_client)
    victim, cancelled = job(7101), job(7102)
    for j in (victim, cancelled):
        backend.submit(j)
    name = m.job_name(victim.id, victim.attempts)
    uid = batch.read_namespaced_job(name, k8s_namespace).metadata.uid
    submitted = wait_for("the Submitted event", lambda: events_of(core, k8s_namespace, name))
    assert [(e.reason, e.type, e.involved_object.kind, e.involved_object.uid) for e in submitted] == [
        ("Submitted", "Normal", "Job", uid)]
    assert "job 7101" in submitted[0].message and "queue training" in submitted[0].message
    assert "user alice" in submitted[0].message
    backend.submit(victim)  # a replayed dispatch finds its Job and posts nothing
    backend.preempt(victim, 1)
    backend.cancel(cancelled)
    assert wait_for("the Preempting event", lambda: sorted(e.reason for e in events_of(core, k8s_namespace, name))
                    == ["Preempting", "Submitted"])
    preempting = [e for e in events_of(core, k8s_namespace, name) if e.reason == "Preempting"][0]
    assert preempting.involved_object.uid == uid and "1s to stop" in preempting.message
    other = m.job_name(cancelled.id, cancelled.attempts)
    assert wait_for("the Cancelling event", lambda: {e.reason for e in events_of(core, k8s_namespace, other)}
                    == {"Submitted", "Cancelling"})
