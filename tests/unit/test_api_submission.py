"""The REST API's pure parts: a submission body read back from the CLI's dry-run JSON, every
problem of a body as one line each, tokens, the dashboard's views, and the published schema."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from crossdock.api import tokens, views
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.sbatch_json import dry_run_json
from crossdock.queue.snapshot import GpuDevice, Node
from crossdock.queue.states import JobState, Reason
from crossdock.queue.submission import BadSubmission, Submission, problems, to_spec

ROOT = Path(__file__).resolve().parents[2]

SPECS = {
    "wrap": JobSpec(command=["/bin/sh", "-c", "echo hi"], name="wrap"),
    "resources": JobSpec(command=["x"], name="big", cpus_per_task=4, ntasks=8, nodes=2, mem_per_cpu_mib=512,
                         gpus={"count": 2, "type": "A100", "per": "node"}, time_limit_seconds=3600,
                         exclusive=True, nodelist=["n1", "n2"], constraint="nvlink"),
    "array and deps": JobSpec(command=["x"], name="a", array={"task_ids": [0, 1, 5], "max_running": 2},
                              dependency={"deps": [{"type": "afterok", "job_id": 7}]}, nice=10, hold=True),
    "paths and signals": JobSpec(script_path="/home/a/run.sh", name="run.sh", args=["--fast"], stdout="o-%j",
                                 stderr="e-%j", workdir="/home/a", export="NONE", env={"A": "1"},
                                 kill_signal={"number": 10, "seconds": 120}, priority_class="training",
                                 begin=datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc), gres=[{"name": "gpu", "count": 1}]),
}


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_the_dry_run_json_reads_back_as_the_same_spec(spec):
    printed = json.loads(json.dumps(dry_run_json(spec)))
    assert set(printed) <= set(Submission.model_fields)
    assert dry_run_json(to_spec(Submission.model_validate(printed))) == printed


def test_every_problem_is_one_line_naming_its_field_and_value():
    with pytest.raises(ValidationError) as exc:
        Submission.model_validate({"ntasks": -1, "gpus": {"count": 0}, "output": 3, "colour": "red"})
    assert problems(exc.value.errors()) == [
        "ntasks: invalid value -1; Input should be greater than or equal to 1",
        "gpus.count: invalid value 0; Input should be greater than or equal to 1",
        "output: invalid value 3; Input should be a valid string",
        "colour: invalid value 'red'; not a field of a submission; see `crossdock submit --dry-run --json` for the fields"]


def test_the_specs_own_checks_name_the_dry_runs_fields():
    with pytest.raises(BadSubmission) as exc:
        to_spec(Submission.model_validate({"command": ["x"], "nodes": 3, "nodes_max": 2}))
    assert exc.value.problems == ["nodes: maximum 2 is below minimum 3"]
    with pytest.raises(BadSubmission, match="qos and priority_class: 'a' and 'b'"):
        to_spec(Submission.model_validate({"command": ["x"], "qos": "a", "priority_class": "b"}))
    assert to_spec(Submission.model_validate({"command": ["x"], "qos": "training"})).priority_class == "training"


class _Access:
    def __init__(self):
        self.records = {}

    def token(self, token_id):
        return self.records.get(token_id)


class _Store:
    def __init__(self):
        self.access = _Access()


def test_a_token_checks_only_as_made_and_only_its_hash_is_kept():
    store = _Store()
    text, record = tokens.new_token("alice", False, "root")
    store.access.records[record["id"]] = record
    assert text.startswith("cdt_") and text.split("_", 2)[2] not in json.dumps(record)
    assert tokens.verify(text, store) == tokens.Token(record["id"], "alice", False)
    flipped = text[:-1] + ("A" if text[-1] != "A" else "B")
    other, _ = tokens.new_token("alice", True, "root")
    for bad in (flipped, other, "cdt_nothing", "", text + "x"):
        with pytest.raises(tokens.BadToken):
            tokens.verify(bad, store)
    with pytest.raises(Exception, match="USER: 'a b' is not a user name"):
        tokens.new_token("a b", False, "root")


def _node(name, gpus, pool="gpu"):
    return Node(name=name, pool=pool, backend="k8s", cpu_milli=32000, memory_mib=65536,
                gpus=tuple(GpuDevice(id=f"{name}:{i}", index=i, model="A100") for i in range(gpus)))


def _job(i, nodes=(), gpus=(), state=JobState.RUNNING, queue="training", reason=Reason.NONE, waited=0.0):
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    return Job(id=i, spec=JobSpec(command=["x"], user="u"), state=state, queue=queue, nodes=list(nodes),
               gpu_ids=list(gpus), reason=reason, eligible_time=now - timedelta(seconds=waited))


def test_the_pool_view_shows_how_fragmented_the_free_gpus_are():
    nodes = [_node("a", 8), _node("b", 8), _node("c", 8)]
    # a: 6 of 8 used, b: 7 of 8, c: 2 of 8 -> free 2, 1, 6
    active = [_job(1, ["a"], [f"a:{i}" for i in range(6)]), _job(2, ["b"], [f"b:{i}" for i in range(7)]),
              _job(3, ["c"], ["c:0", "c:1"])]
    [pool] = views.pool_view(nodes, active)
    assert pool["gpu_models"]["A100"] == {"total": 24, "used": 15, "free": 9, "largest_free_block": 6,
                                          "fits": {"1": 9, "2": 4, "4": 1, "8": 0}}
    assert [g["job"] for g in pool["nodes"][1]["gpus"]] == [2] * 7 + [None]


def test_queue_rows_count_depth_held_apart_and_wait():
    cfg = ClusterConfig.model_validate({
        "priority_classes": {"training": {"value": 100}},
        "pools": {"p": {"backend": "local", "nodes": [{"name": "n", "cpus": 1, "memory_mib": 1024}]}},
        "queues": {"training": {"priority_class": "training", "pools": ["p"]}}, "default_queue": "training"})
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    pending = [_job(1, state=JobState.PENDING, waited=10), _job(2, state=JobState.PENDING, waited=30),
               _job(3, state=JobState.PENDING, waited=99, reason=Reason.JOB_HELD_USER),
               _job(4, state=JobState.PENDING, queue="gone", waited=5)]
    rows = {r["queue"]: r for r in views.queue_rows(cfg, pending, [_job(5)], now)}
    assert rows["training"] == {"queue": "training", "priority_class": "training", "pools": ["p"], "pending": 2,
                                "held": 1, "running": 1, "oldest_wait_seconds": 30.0, "median_wait_seconds": 20.0}
    assert rows["gone"]["pending"] == 1


def test_disruptions_are_preemptions_and_migrations():
    events = [{"job": "1", "from": "RUNNING", "to": "PREEMPTED", "reason": "Preempted"},
              {"job": "2", "event": "migrated", "reason": "Migrated", "from": "n1", "to": "n2"},
              {"job": "2", "from": "RUNNING", "to": "PENDING", "reason": "Migrated"},
              {"job": "3", "from": "PENDING", "to": "RUNNING", "reason": ""},
              {"job": "4", "event": "eviction_refused", "reason": "Migrated", "from": "n1", "to": ""}]
    assert [(d["kind"], d["job"]) for d in views.disruptions(events)] == [
        ("preemption", "1"), ("migration", "2"), ("eviction refused", "4")]


def surface(schema: dict) -> dict:
    """What a client relies on: every operation's parameters, body and answers, every model's
    fields (not how a FastAPI release happens to spell the rest)."""
    ops = {f"{method.upper()} {path}": {
        "summary": op.get("summary"),
        "parameters": sorted((p["in"], p["name"], p.get("required", False)) for p in op.get("parameters", [])),
        "body": json.dumps(op.get("requestBody", {}).get("content", {}), sort_keys=True),
        "responses": sorted(op.get("responses", {})),
    } for path, methods in schema["paths"].items() for method, op in methods.items()}
    models = {name: sorted(m.get("properties", {})) for name, m in schema["components"]["schemas"].items()}
    return {"operations": ops, "models": models}


def test_the_published_openapi_schema_is_current():
    from crossdock.api import openapi

    published = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert surface(published) == surface(openapi.schema()), \
        "docs/openapi.json is stale: python -m crossdock.api.openapi > docs/openapi.json"


def test_the_descheduler_status_reads_what_the_installation_has():
    from types import SimpleNamespace

    from pydantic import BaseModel

    class Descheduler(BaseModel):  # the shape of config.descheduler
        enabled: bool = False
        dry_run: bool = False
        interval_seconds: float = 30

    plan = {"at": 1.0, "migrations": [], "evicted": [], "skipped": [], "unblocked": []}
    on = SimpleNamespace(config=SimpleNamespace(descheduler=Descheduler(enabled=True)),
                         store=SimpleNamespace(deschedule=SimpleNamespace(last_plan=lambda: plan)))
    assert views.descheduler_status(on) == {"enabled": True, "last_pass": plan, "config": {
        "enabled": True, "dry_run": False, "interval_seconds": 30.0}}
    off = SimpleNamespace(config=SimpleNamespace(descheduler=Descheduler()), store=SimpleNamespace())
    assert views.descheduler_status(off)["enabled"] is False
    none = SimpleNamespace(config=SimpleNamespace(), store=SimpleNamespace())
    assert views.descheduler_status(none) == {"enabled": False, "config": None, "last_pass": None}
