"""``crossdock serve`` and ``crossdock services …`` as users run them (a subprocess, real Redis):
what they store, one-line errors with exit 2, the owner-or-admin rule, the throttling warning in
``services show`` and ``config check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from crossdock import serve
from crossdock.queue.errors import PermissionDenied
from crossdock.queue.services import ServiceMetrics, ServiceSpec, ServiceStatus
from crossdock.service import Caller

pytestmark = [pytest.mark.redis, pytest.mark.services]


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_serve_list_show_scale_update_delete(crossdock_env, store):
    r = cli(crossdock_env, "serve", "chat", "--replicas", "1:4", "--target-qps", "20", "-q", "inference",
            "--mem", "1G", "--env", "MODEL=small", "--", sys.executable, "-m", "http.server")
    assert r.returncode == 0, r.stderr
    rec = store.services.get("chat")
    assert (rec.spec.min_replicas, rec.spec.max_replicas, rec.spec.target_qps, rec.spec.mem_mib) == (1, 4, 20, 1024)
    assert rec.spec.command == [sys.executable, "-m", "http.server"] and rec.spec.env == {"MODEL": "small", "PATH": os.environ["PATH"]}
    assert rec.spec.user and rec.generation == 1

    listed = json.loads(cli(crossdock_env, "services", "list", "--json").stdout)
    assert [(s["name"], s["state"], s["generation"]) for s in listed] == [("chat", "DEPLOYING", 1)]

    assert cli(crossdock_env, "services", "scale", "chat", "3").returncode == 0
    assert store.services.get("chat").override == 3
    assert cli(crossdock_env, "services", "scale", "chat", "--auto").returncode == 0
    assert store.services.get("chat").override is None

    r = cli(crossdock_env, "services", "update", "chat", "--replicas", "2:6")
    assert r.returncode == 0 and "generation stays 1" in r.stdout, r.stderr
    r = cli(crossdock_env, "services", "update", "chat", "--cpus", "2")
    assert r.returncode == 0 and "rolling update to generation 2" in r.stdout, r.stderr
    shown = json.loads(cli(crossdock_env, "services", "show", "chat", "--json").stdout)
    assert shown["spec"]["cpus"] == 2 and shown["spec"]["max_replicas"] == 6 and shown["generation"] == 2
    assert [e["event"] for e in shown["events"]][:2] == ["deployed", "override"]

    assert cli(crossdock_env, "services", "delete", "chat").returncode == 0
    assert store.services.get("chat").deleting


@pytest.mark.parametrize(("args", "needle"), [
    (["serve", "Chat", "--", "x"], "name: 'Chat' is not a service name"),
    (["serve", "chat"], "command, image: give a command"),
    (["serve", "chat", "--replicas", "5:2", "--", "x"], "min_replicas, max_replicas: 5 is above 2"),
    (["serve", "chat", "--replicas", "two", "--", "x"], "--replicas: invalid value 'two'"),
    (["serve", "chat", "-q", "nope", "--", "x"], "queue: unknown queue 'nope'"),
    (["serve", "chat", "-q", "inference", "--pools", "gpu", "--", "x"], "pools: 'gpu' is not one of queue"),
    (["serve", "chat", "--cpus", "64", "--", "x"], "a replica could not run: --cpus-per-task: 64 CPUs per node"),
    (["services", "show", "ghost"], "service 'ghost': no such service"),
    (["services", "scale", "ghost"], "scale: give a replica count N, or --auto"),
], ids=["name", "nothing", "min-max", "replicas-form", "queue", "pools", "too-big", "unknown", "scale-args"])
def test_bad_input_is_one_line_and_exit_2(crossdock_env, store, args, needle):
    r = cli(crossdock_env, *args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
    assert store.services.names() == []


def test_only_the_owner_or_an_admin_changes_a_service(runtime):
    ana, bo, admin = Caller("ana", False), Caller("bo", False), Caller("root", True)
    serve.deploy(runtime, ServiceSpec(name="chat", command=["x"], queue="inference"), ana)
    for act in (lambda: serve.scale(runtime, "chat", 2, bo), lambda: serve.delete(runtime, "chat", bo),
                lambda: serve.update(runtime, "chat", {"cpus": 2}, bo),
                lambda: serve.deploy(runtime, ServiceSpec(name="chat", command=["y"], queue="inference"), bo)):
        with pytest.raises(PermissionDenied, match="it belongs to 'ana' and you are 'bo'"):
            act()
    assert runtime.store.services.get("chat").override is None
    assert [e["event"] for e in runtime.store.services.events("chat")].count("refused") == 4
    assert serve.scale(runtime, "chat", 2, admin).override == 2
    assert serve.update(runtime, "chat", {"cpus": 2}, admin).spec.user == "ana"  # the owner stays


def test_the_throttling_trap_is_shown_and_checked(crossdock_env, runtime, tmp_path):
    store = runtime.store
    serve.deploy(runtime, ServiceSpec(name="chat", command=["x"], queue="inference", cpus=1), Caller("ana", False))
    store.services.set_status("chat", ServiceStatus(cpu_used=2.5))
    r = cli(crossdock_env, "services", "show", "chat")
    assert r.returncode == 0 and "CPU request 1 per replica is below 0.8 × the 2.50 CPUs" in r.stdout, r.stdout
    assert "raise cpus to at least 2" in r.stdout
    # config check: a declared service, measured by its traffic source as using 3 CPUs a replica
    cfg = yaml.safe_load(open(crossdock_env["CROSSDOCK_CONFIG"]))
    cfg["services"] = {"deploy": {"chat": {"command": ["x"], "queue": "inference", "cpus": 2}}}
    path = tmp_path / "with-services.yaml"
    path.write_text(yaml.safe_dump(cfg))
    store.services.put_metrics("chat", ServiceMetrics(qps=1, cpu_used={0: 3.0, 1: 1.0}, at=1))
    r = cli(crossdock_env, "config", "check", str(path))
    needle = "warning: services.deploy.chat.cpus: service 'chat': CPU request 2 per replica is below 0.8 × the 3.00"
    assert r.returncode == 0 and needle in r.stderr, r
    store.services.put_metrics("chat", ServiceMetrics(qps=1, cpu_used={0: 2.0}, at=1))
    r = cli(crossdock_env, "config", "check", str(path))
    assert r.returncode == 0 and "CPU request" not in r.stderr, r.stderr


def test_client_serve_returns_a_handle_that_follows_the_service(runtime):
    from crossdock.client import Client
    from crossdock.queue.errors import InvalidArgument
    from crossdock.queue.services import ServiceState
    from crossdock.workers.services import ServiceStep

    client = Client(runtime)
    with pytest.raises(InvalidArgument, match="min_replicas, max_replicas: 4 is above 2"):
        client.serve("chat", "python -m server", replicas=(4, 2))
    handle = client.serve("chat", "python -m server --port 0", replicas=(1, 3), target_qps=15, queue="inference",
                          mem="512M")
    rec = handle.record()
    assert rec.spec.command == ["python", "-m", "server", "--port", "0"] and rec.spec.mem_mib == 512
    assert rec.spec.user == client.user and (rec.spec.min_replicas, rec.spec.max_replicas) == (1, 3)
    assert handle.scale(2).override == 2
    assert handle.update(cpus=2).generation == 2
    assert client.service("chat").record().generation == 2
    handle.delete()
    step = ServiceStep(runtime, "test-leader", lambda *a: None)
    step.pass_once()  # its pending replica (never placed) stops at once
    step.pass_once()  # ... and is forgotten: the record goes
    assert handle.wait("DELETED", timeout=5).status.state is ServiceState.DELETED
    assert runtime.store.services.get("chat") is None


def test_a_submitted_job_cannot_claim_to_be_a_replica(runtime):
    from crossdock import service
    from crossdock.queue.errors import InvalidJob
    from crossdock.queue.models import JobSpec, ServiceReplica

    with pytest.raises(InvalidJob, match="service: a job cannot claim to be a service replica"):
        service.submit(runtime, [JobSpec(command=["true"], service=ServiceReplica(name="chat", replica=0))])
    assert runtime.store.pending_ids() == []


def test_the_leader_deploys_what_the_config_declares(crossdock_env, tmp_path, monkeypatch):
    from crossdock.runtime import Runtime
    from crossdock.workers.services import ServiceStep

    cfg = yaml.safe_load(open(crossdock_env["CROSSDOCK_CONFIG"]))
    cfg["services"] = {"deploy": {"chat": {"command": ["x"], "queue": "inference", "min_replicas": 0,
                                           "max_replicas": 3, "user": "ana"}}}
    path = tmp_path / "declared.yaml"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("CROSSDOCK_CONFIG", str(path))
    rt = Runtime.from_env()
    step = ServiceStep(rt, "leader-test", lambda *a: None)
    assert step.wanted() and rt.store.services.names() == []
    step.pass_once()
    rec = rt.store.services.get("chat")
    assert rec.spec.user == "ana" and rec.spec.max_replicas == 3 and rec.generation == 1
    assert [e["event"] for e in rt.store.services.events("chat")][0] == "deployed"
    serve.scale(rt, "chat", 2, Caller("ana", False))
    step.pass_once()  # an unchanged declaration is not deployed again: the owner's override stays
    assert rt.store.services.get("chat").override == 2 and rt.store.services.get("chat").generation == 1


def test_replica_jobs_that_expired_from_the_store_are_forgotten(runtime):
    from crossdock.workers.services import ServiceStep

    serve.deploy(runtime, ServiceSpec(name="chat", command=["x"], queue="inference", min_replicas=0),
                 Caller("ana", False))
    runtime.store.services.add_replicas("chat", [987654])  # archived by retention meanwhile
    ServiceStep(runtime, "leader-test", lambda *a: None).pass_once()
    assert runtime.store.services.replica_ids("chat") == []


def test_show_of_a_replica_job_names_its_service(crossdock_env, runtime):
    from crossdock.queue.models import Job, JobSpec, ServiceReplica

    (job,) = runtime.store.submit([Job(id=0, queue="inference", spec=JobSpec(
        command=["x"], service=ServiceReplica(name="chat", replica=3, generation=2)))])
    r = cli(crossdock_env, "show", str(job.id))
    assert r.returncode == 0 and "Service=chat Replica=3 Generation=2 (crossdock services show chat)" in r.stdout, r
