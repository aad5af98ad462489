"""Python functions through crossdock to the real control plane. kwok runs no containers, so the
test runs the exact command and environment crossdock wrote into the pod as a local process (as
the container would, the job's index from Kubernetes included) and checks the outcome reaches the
store and ``result()``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import pytest
from kubernetes import client
from test_k8s_array_dispatch import crossdock_on_k8s  # noqa: F401 - the fixture

from crossdock.backends.kubernetes import manifests as m
from crossdock.client import Client
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.kubernetes, pytest.mark.redis, pytest.mark.celery]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job cannot import this test module


class Refused(Exception):
    pass


def scale(x, b=1):
    return x * b


def refuse(x):
    raise Refused(f"refused {x}")


def created_job(k8s_client, namespace: str, label: str, value: int, timeout: float = 60) -> client.V1Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = client.BatchV1Api(k8s_client).list_namespaced_job(namespace, label_selector=f"{label}={value}").items
        if jobs:
            return jobs[0]
        time.sleep(0.2)
    raise AssertionError(f"no Kubernetes Job labelled {label}={value} after {timeout}s")


def run_container(kjob: client.V1Job, index: int | None = None) -> subprocess.CompletedProcess:
    """The main container's command with its environment, as its image would run it: ``python``
    on the PATH is this interpreter (with crossdock), ``JOB_COMPLETION_INDEX`` set by Kubernetes,
    the first process leading its own session and process group (as runc starts a container's)."""
    container = next(c for c in kjob.spec.template.spec.containers if c.name == m.CONTAINER)
    env = {e.name: e.value for e in container.env or [] if e.value is not None}
    assert "CROSSDOCK_PYTHON_PAYLOAD" not in env  # the payload comes from the store
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.run(container.command + list(container.args or []), env=env, capture_output=True,
                          text=True, timeout=120, cwd=container.working_dir or None, start_new_session=True)


@pytest.fixture
def py_client(crossdock_on_k8s, monkeypatch):  # noqa: F811
    monkeypatch.setenv("CROSSDOCK_SIMULATE_RUN_SECONDS", "20")  # the pod "runs" while the test runs its container
    return Client(crossdock_on_k8s.rt)


def test_return_value_and_remote_exception_reach_the_store(py_client, k8s_client, k8s_namespace):
    ok = py_client.submit(scale, 6, b=7)
    proc = run_container(created_job(k8s_client, k8s_namespace, m.LABEL_JOB_ID, ok.id))
    assert proc.returncode == 0, proc.stderr
    assert py_client.runtime.store.result(ok.id) is not None  # stored by the container's runner
    assert ok.result(timeout=120) == 42 and ok.state is JobState.COMPLETED

    bad = py_client.submit(refuse, 3)
    proc = run_container(created_job(k8s_client, k8s_namespace, m.LABEL_JOB_ID, bad.id))
    assert proc.returncode == 1 and "Refused: refused 3" in proc.stdout + proc.stderr  # one stream, kept by the runner
    with pytest.raises(Refused, match="refused 3") as exc:
        bad.result(timeout=120)
    assert any("remote traceback" in n and "refuse" in n for n in exc.value.__notes__)


def test_map_over_a_thousand_inputs(py_client, k8s_client, k8s_namespace, monkeypatch):
    monkeypatch.setenv("CROSSDOCK_SIMULATE_RUN_SECONDS", "30")  # ten containers to run while the pods "run"
    handles = py_client.map(lambda x: x + 100, range(1000), chunksize=100)
    assert len(handles) == 1000 and len({h.id for h in handles}) == 10  # ten tasks of 100 inputs
    fields, size = py_client.runtime.store.call_parts_size(handles[0].job.spec.python.parts)
    assert fields == 11 and size / 1000 < 100, size  # the function once, each input once (~20 B sealed)
    kjob = created_job(k8s_client, k8s_namespace, m.LABEL_ARRAY_JOB, handles[0].job.array_job_id)
    assert kjob.spec.completions == 10  # one Indexed Job, a completion per task
    with ThreadPoolExecutor(4) as pool:
        for proc in pool.map(lambda index: run_container(kjob, index), range(10)):
            assert proc.returncode == 0, proc.stderr
    assert [h.result(timeout=120) for h in handles] == [x + 100 for x in range(1000)]
